"""The shared-prefix forward's key/value cache, safe to replay under gradient checkpointing.

`swarm.policy.prefix` runs a micro-batch's distinct prompts once and its completions as their
continuation. A Hugging Face `DynamicCache` would carry the prompts' keys and values from one
pass to the other, but it appends on every `update`: a decoder layer under activation
checkpointing runs again in the backward pass and would append a second time, so Hugging Face
drops any cache in a checkpointed layer (`GradientCheckpointingLayer`). The cache here never
grows. In the prompt pass each layer keeps the keys/values it was given the first time
(`written`); in the completion pass each layer returns its prompt's keys/values (the row of
each completion's prompt, picked inside the layer) followed by the completion's own, storing
nothing. A replayed layer thus sees exactly what it saw in the forward pass, which is what a
layer needs to keep its cache under checkpointing (`_can_checkpoint_with_cache`).

The prompt keys/values are held once, [prompts, heads, prompt length, head dim] per layer;
their expansion over the completions exists only inside a layer's forward (and its replay).

Imports transformers: load it lazily (only `swarm.policy.prefix` does).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

from swarm.core.errors import ModelError


class PrefixLayer(DynamicLayer):
    """One decoder layer's keys/values: an optional fixed prefix, and what the pass wrote."""

    def __init__(
        self,
        keys: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        rows: torch.Tensor | None = None,
    ):
        super().__init__()
        self.rows = rows  # the prefix row each batch row attends to
        self.written: tuple[torch.Tensor, torch.Tensor] | None = None
        self.reads = 0
        if keys is not None and values is not None:
            self.keys, self.values = keys, values
            self.device = keys.device
            self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """The prefix's keys/values (picked per row) followed by `key_states`/`value_states`.

        Without a prefix (the prompt pass) the first call's states are kept as `written`, and
        a replay leaves them; with one (the completion pass) nothing is kept.
        """
        self.reads += 1
        if not self.is_initialized:
            if self.written is None:
                self.written = (key_states, value_states)
            return key_states, value_states
        assert self.keys is not None and self.values is not None  # set with the prefix
        return (
            torch.cat([self.keys[self.rows], key_states], dim=-2),
            torch.cat([self.values[self.rows], value_states], dim=-2),
        )


class PrefixCache(Cache):
    """The cache of one pass of the shared-prefix forward (a `PrefixLayer` per decoder layer)."""

    def __init__(self, layers: list[PrefixLayer]):
        super().__init__(layers=list[Any](layers))
        self.prefix_layers = layers

    @classmethod
    def empty(cls, layers: int) -> PrefixCache:
        """The cache of a prompt pass through `layers` decoder layers."""
        return cls([PrefixLayer() for _ in range(layers)])

    def continuation(self, rows: torch.Tensor) -> PrefixCache:
        """The cache for the next pass: what this pass wrote, row `rows[i]` for batch row i."""
        written = [layer.written for layer in self.prefix_layers]
        kept = [w for w in written if w is not None]
        if not written or len(kept) < len(written):
            raise ModelError("the prompt pass left no keys/values: the model dropped the cache")
        return PrefixCache([PrefixLayer(keys, values, rows) for keys, values in kept])

    def check_all_read(self) -> None:
        """Raise unless every layer read its prefix: a layer without it would be silently wrong."""
        if any(layer.reads == 0 for layer in self.prefix_layers):
            raise ModelError("a decoder layer ignored the prompt cache in the completion pass")


def replays_safely(model: torch.nn.Module) -> bool:
    """Whether every checkpointed decoder layer of `model` (if any) can keep a `PrefixCache`.

    That takes non-reentrant checkpointing (the prompt keys/values leave the layer as side
    outputs, and enter the completion layers from outside their inputs: the reentrant variant
    would cut the gradient through both) and a transformers that lets a layer keep its cache
    (`GradientCheckpointingLayer._can_checkpoint_with_cache`). No checkpointed layer: True.
    """
    layers = checkpointed_layers(model)
    if not layers:
        return True
    if not hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache"):
        return False
    return all(
        _non_reentrant(getattr(layer, "_gradient_checkpointing_func", None)) for layer in layers
    )


def checkpointed_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of `model` whose gradient checkpointing is on."""
    return [
        m
        for m in model.modules()
        if isinstance(m, GradientCheckpointingLayer) and getattr(m, "gradient_checkpointing", False)
    ]


def _non_reentrant(checkpoint_func) -> bool:
    """Whether a layer's checkpoint function is `torch.utils.checkpoint` with use_reentrant=False."""
    return (
        isinstance(checkpoint_func, functools.partial)
        and checkpoint_func.keywords.get("use_reentrant") is False
    )


@contextmanager
def cache_kept_under_checkpointing(model: torch.nn.Module) -> Iterator[None]:
    """Let `model`'s checkpointed layers keep the cache they are given, for this block only.

    Only for a `PrefixCache`, which a replay cannot change. The layer decides when it is
    called, so the backward replays after the block still see the cache.
    """
    layers = [m for m in checkpointed_layers(model) if not m._can_checkpoint_with_cache]
    for layer in layers:
        setattr(layer, "_can_checkpoint_with_cache", True)  # noqa: B010 - a torch.nn.Module's
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache  # back to the class's value
