"""Turning a question into the text a model is prompted with.

One function so every node, generator and evaluator builds prompts the same way: the
tokenizer's own chat template when it has one (real instruct models, and the built-in tiny
model, which ships a minimal template), otherwise the question followed by a newline.

Under a chat template a `PromptFormat` may carry worked examples (`policy.prompt_examples`):
each is one earlier user turn and the assistant's answer in the expected format, placed
between the system prompt and the question. A small instruct model that ignores "answer
between <answer> and </answer>" in words follows it from two examples (SmolLM2-135M:
`scripts/bench_prompt_format.py` compares prompts with and without them).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SYSTEM_PROMPT = (
    "Solve the task. Think briefly if needed, then give only the final answer "
    "between <answer> and </answer>."
)


# Two worked examples of arithmetic in the answer format (node_config/smollm2-cpu.toml's).
ARITHMETIC_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("State the final answer to the following arithmetic problem: 3 + 4 =", "<answer>7</answer>"),
    ("What is 12 - 5?", "12 - 5 = 7, so the answer is <answer>7</answer>"),
)


@dataclass(frozen=True)
class PromptFormat:
    """What surrounds a question in its prompt: the system prompt and worked examples."""

    system: str = DEFAULT_SYSTEM_PROMPT
    examples: tuple[tuple[str, str], ...] = ()  # (question, answer) turns before the question


def chat_messages(question: str, form: PromptFormat) -> list[dict[str, str]]:
    """The chat of a prompt: system prompt, each example's two turns, then the question."""
    messages = [{"role": "system", "content": form.system}] if form.system else []
    for asked, answered in form.examples:
        messages.append({"role": "user", "content": asked})
        messages.append({"role": "assistant", "content": answered})
    messages.append({"role": "user", "content": question})
    return messages


def build_prompt(tokenizer, question: str, form: PromptFormat | str = PromptFormat()) -> str:
    """The prompt text for `question` under `tokenizer`'s chat template (if any); `form` is a
    `PromptFormat` or a system prompt alone."""
    if isinstance(form, str):
        form = PromptFormat(system=form)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            chat_messages(question, form), add_generation_prompt=True, tokenize=False
        )
    return question + "\n"
