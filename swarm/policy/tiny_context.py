"""A built-in model's prompts, formatted and counted in tokens without transformers.

The context check of a config (`swarm.config.preflight.check_context`) formats a sample of
the task mix's questions as the node does and counts their tokens. For a built-in model
that needs only the recipe's tokenizer and chat template: `light_tokenizer` gives both
through the `tokenizers` library and jinja2, with the same prompts and token IDs as
`swarm.policy.tiny.build_tokenizer`'s `PreTrainedTokenizerFast`, so checking a config
imports neither transformers nor torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swarm.policy.tiny import CHAT_TEMPLATE, TINY_MODELS, TinyRecipe, core_tokenizer


@dataclass(frozen=True)
class LightTokenizer:
    """What `swarm.policy.prompts.build_prompt` and the context check ask of a tokenizer:
    its chat template applied as text, and a text's token IDs."""

    core: Any  # a tokenizers.Tokenizer
    chat_template: str = CHAT_TEMPLATE

    def apply_chat_template(
        self, messages: list[dict], add_generation_prompt: bool = False, tokenize: bool = False
    ) -> str:
        if tokenize:
            raise ValueError("LightTokenizer.apply_chat_template gives text only (tokenize=False)")
        # As transformers renders chat templates: a sandbox, block whitespace trimmed.
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        template = env.from_string(self.chat_template)
        return template.render(messages=messages, add_generation_prompt=add_generation_prompt)

    def __call__(
        self, text: str, add_special_tokens: bool = True, verbose: bool = True
    ) -> dict[str, list[int]]:
        return {"input_ids": self.core.encode(text, add_special_tokens=add_special_tokens).ids}


def light_tokenizer(recipe: TinyRecipe | str) -> LightTokenizer:
    """The tokenizer of a built-in model (a recipe or a name in `TINY_MODELS`)."""
    if isinstance(recipe, str):
        recipe = TINY_MODELS[recipe]
    return LightTokenizer(core_tokenizer(recipe))
