"""Peers' completions known only as text, re-tokenized for training: overlong ones cost nothing."""

from __future__ import annotations

from swarm.policy.trainer import MAX_CHARS_PER_TOKEN, retokenized_samples


class CountingTokenizer:
    """One token per character; counts the characters it was asked to tokenize."""

    eos_token_id = 0

    def __init__(self):
        self.chars = 0

    def __call__(self, text, add_special_tokens=False):
        self.chars += len(text)
        return {"input_ids": [ord(c) for c in text]}


def test_overlong_texts_are_left_out_before_tokenizing():
    tok = CountingTokenizer()
    crafted = "<answer>" * 4000  # 32 KB
    samples = retokenized_samples(tok, "p", ["ok", crafted], [True, True], [1.0, 1.0], 64)
    assert [s.completion_ids for s in samples] == [(ord("o"), ord("k"), 0)]
    assert tok.chars == len("p") + len("ok")  # the crafted text was never tokenized
    assert len(crafted) > MAX_CHARS_PER_TOKEN * 64
