"""Turning a question into the text a model is prompted with.

One function so every node, generator and evaluator builds prompts the same way: the
tokenizer's own chat template when it has one (real instruct models, and the built-in tiny
model, which ships a minimal template), otherwise the question followed by a newline.
"""

from __future__ import annotations

DEFAULT_SYSTEM_PROMPT = (
    "Solve the task. Think briefly if needed, then give only the final answer "
    "between <answer> and </answer>."
)


def build_prompt(tokenizer, question: str, system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> str:
    """The prompt text for `question` under `tokenizer`'s chat template (if any)."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": question}]
        if system_prompt:
            messages.insert(0, {"role": "system", "content": system_prompt})
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return question + "\n"
