"""Prompts with worked examples: the chat's turns in order, a bare system prompt still
accepted, and a malformed `policy.prompt_examples` refused in one line."""

import pytest

from swarm.config.load import load_config
from swarm.core.errors import ConfigError
from swarm.policy.prompts import PromptFormat, build_prompt, chat_messages


class ChatTokenizer:
    chat_template = "a template"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"


def test_examples_stand_between_the_system_prompt_and_the_question():
    form = PromptFormat(
        "be brief", (("1+1?", "<answer>2</answer>"), ("2+2?", "<answer>4</answer>"))
    )
    roles = [m["role"] for m in chat_messages("3+3?", form)]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert build_prompt(ChatTokenizer(), "3+3?", form) == (
        "system:be brief|user:1+1?|assistant:<answer>2</answer>|user:2+2?|"
        "assistant:<answer>4</answer>|user:3+3?|assistant:"
    )


def test_a_system_prompt_alone_is_a_format_without_examples():
    tokenizer = ChatTokenizer()
    assert build_prompt(tokenizer, "q", "sys") == build_prompt(tokenizer, "q", PromptFormat("sys"))
    assert build_prompt(tokenizer, "q", "") == "user:q|assistant:"


def test_without_a_chat_template_the_question_stands_alone():
    class Plain:
        chat_template = None

    assert build_prompt(Plain(), "q", PromptFormat("sys", (("a", "b"),))) == "q\n"


@pytest.mark.parametrize(
    "value",
    [
        '[{question = "q"}]',
        '[{question = "q", answer = ""}]',
        '[{question = "q", answer = "a", hint = "h"}]',
        '["q"]',
    ],
)
def test_malformed_examples_are_one_line(value):
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"policy.prompt_examples={value}"], env={})
    assert "policy.prompt_examples[0] must be a table" in str(caught.value)
    assert "\n" not in str(caught.value)
