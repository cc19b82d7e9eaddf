"""The GRPO trainer: one optimizer update from a batch of scored completions.

Takes `TrainSample`s (prompt tokens, completion tokens, advantage) that the node built from
its own and shared groups, computes log-probs under the current policy, and applies the
clipped loss from `swarm.policy.grpo` with gradient accumulation over micro-batches (the gradients exist only
during a step: freed after it),
optional gradient clipping, optional KL to a frozen reference and optional bf16 autocast.
The optimizer always updates fp32 weights: a model loaded in bf16 or fp16 is cast to fp32
(master weights) and its forward runs under autocast in the dtype it was loaded in, because
an AdamW step at lr 1e-6 is far below a bf16 weight's resolution and would round to nothing.
The optimizer is AdamW (betas 0.9/0.99, the default) or plain Adam with PyTorch's defaults
(betas 0.9/0.999, eps 1e-8, no weight decay), as the SAPO paper used; either keeps its two
moments in fp32 (torch's) or in bf16 (`swarm.policy.optim`: half the optimizer's memory).

Deliberately not here: choosing which groups to train on (`swarm.batch_choice`), rewards
(`swarm.tasks`), or anything about peers.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from enum import StrEnum

import torch

from swarm.core.errors import ModelError
from swarm.policy.grpo import clipped_policy_loss, truncated_importance_weights
from swarm.policy.optim import Bf16StateAdam
from swarm.policy.prefix import (
    hidden_logprobs,
    pack_prefix_batch,
    prefix_hidden,
    supports_shared_prefix,
)


@dataclass(frozen=True)
class TrainSample:
    """One completion to learn from, in the local tokenizer's ids."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    advantage: float
    weight: float = 1.0  # multiplies its token losses (the shared part's weight, grpo.part_weights)
    shaping: float = 0.0  # policy shaping's γ for an off-policy completion (0: clipped ratio)
    # The generator's log-prob of each completion token (own completions; a stop token after
    # them has none): with `importance_cap` set, the loss is weighted by the trainer's over them.
    sampler_logprobs: tuple[float, ...] = ()


MAX_CHARS_PER_TOKEN = 32


def retokenized_samples(
    tokenizer, prompt: str, completions, finished, advantages, max_tokens: int
) -> list[TrainSample]:
    """Samples for completions known only as text (a peer's, or a stored group's), in our ids.

    The stop token is appended where a completion finished. Empty completions and ones longer
    than `max_tokens` are left out (their advantage still shaped the others'): someone else's
    rambling must not blow up our training step. A text longer than `MAX_CHARS_PER_TOKEN`
    characters per allowed token is left out without being tokenized: no tokenizer packs
    that much into a token, and a peer's 32 KB completions must not cost a tokenizer pass
    each to find out.
    """
    eos = tokenizer.eos_token_id
    prompt_ids = tuple(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    samples = []
    for text, done, advantage in zip(completions, finished, advantages, strict=True):
        if len(text) > MAX_CHARS_PER_TOKEN * max_tokens:
            continue
        ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) + (
            (eos,) if done and eos is not None else ()
        )
        if 0 < len(ids) <= max_tokens:
            samples.append(TrainSample(prompt_ids, ids, advantage))
    return samples


@dataclass(frozen=True)
class UpdateResult:
    """What one update did (or why it was skipped)."""

    skipped: bool
    skip_reason: str = ""
    loss: float = 0.0
    grad_norm: float = 0.0
    clip_fraction: float = 0.0
    kl: float = 0.0
    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0  # optimizer steps taken (epochs x mini-batches)


class OptimizerKind(StrEnum):
    """Which optimizer the trainer builds."""

    ADAMW = "adamw"  # AdamW, betas (0.9, 0.99), settings.weight_decay
    ADAM = "adam"  # torch.optim.Adam with its defaults: betas (0.9, 0.999), eps 1e-8, no decay


class OptimizerState(StrEnum):
    """The dtype the optimizer keeps its moments in (its steps compute in fp32 either way)."""

    FP32 = "fp32"  # torch's own Adam / AdamW
    BF16 = "bf16"  # the same update with bf16 moments: half the memory (swarm.policy.optim)


@dataclass(frozen=True)
class TrainerSettings:
    """The trainer's knobs (mirrors `swarm.config.TrainingSection`, without I/O concerns)."""

    lr: float = 1e-6
    weight_decay: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    max_grad_norm: float = 1.0  # 0: no clipping (the norm is still measured and reported)
    micro_batch_size: int = 32
    minibatch_size: int = 0  # completions per optimizer step; 0: the whole batch in one step
    epochs: int = 1
    autocast_bf16: bool = False
    optimizer: OptimizerKind = OptimizerKind.ADAMW
    optimizer_state: OptimizerState = OptimizerState.FP32
    # Each distinct prompt of a micro-batch runs once and its completions attend to its
    # cache (swarm.policy.prefix): same loss and gradients, less compute and memory, with
    # gradient checkpointing on or off. False: every row runs prompt + completion.
    shared_prefix: bool = True
    gradient_checkpointing: bool = False  # recompute layer activations in the backward pass
    # Truncated importance sampling between the generator's log-probs and the trainer's: each
    # token's loss weighs min(π_trainer / π_sampler, cap); 0 turns it off (one engine, one
    # precision: nothing to correct).
    importance_cap: float = 0.0


class GRPOTrainer:
    """Owns the optimizer (and reference model when KL is on) for one policy module."""

    def __init__(self, model: torch.nn.Module, pad_id: int, settings: TrainerSettings):
        self.model = model
        self.pad_id = pad_id
        self.settings = settings
        loaded = fp32_master_weights(model)
        if settings.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        # The forward's compute dtype: what the model was loaded in, or bf16 when asked for.
        self.autocast_dtype: torch.dtype | None = (
            loaded if loaded is not None else torch.bfloat16 if settings.autocast_bf16 else None
        )
        self.optimizer = build_optimizer(model, settings)
        self.reference = None
        if settings.kl_coef > 0:
            self.reference = copy.deepcopy(model).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)

    def update(self, samples: list[TrainSample]) -> UpdateResult:
        """Optimizer steps over `samples`: per epoch, one per mini-batch; skipped if none carries signal.

        With `minibatch_size` 0 the whole batch is one step, so a round makes one step however
        many groups it holds. With a fixed mini-batch size the number of steps grows with the
        completions that carry signal, as in PPO-style trainers. Every step after the first is
        off-policy, so the ratio is then taken against the log-probs from before the update.
        """
        start = time.perf_counter()
        useful = [s for s in samples if s.advantage != 0.0 and s.completion_ids]
        if not useful:
            return UpdateResult(
                skipped=True, skip_reason="zero_advantage" if samples else "empty_batch"
            )
        size = self.settings.minibatch_size or len(useful)
        minibatches = [useful[i : i + size] for i in range(0, len(useful), size)]
        multi_step = self.settings.epochs > 1 or len(minibatches) > 1
        old = (
            [self._old_logprobs(mb) for mb in minibatches]
            if multi_step
            else [None] * len(minibatches)
        )
        self.model.train()
        steps = [
            self._step(mb, mb_old)
            for _ in range(self.settings.epochs)
            for mb, mb_old in zip(minibatches, old, strict=True)
        ]
        self.model.eval()
        tokens = sum(len(s.completion_ids) for s in useful)
        last = steps[-1]
        return UpdateResult(
            skipped=False,
            loss=last.loss,
            grad_norm=last.grad_norm,
            clip_fraction=last.clip_fraction,
            kl=last.kl,
            tokens=tokens,
            seconds=time.perf_counter() - start,
            steps=len(steps),
        )

    def logprobs(self, samples: list[TrainSample]) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs of each completion under the current model (no gradient), and
        the mask of its real tokens: row i, column j is completion i's token j."""
        return self._logprobs(samples, grad=False)

    def sequence_logprobs(self, samples: list[TrainSample]) -> list[float]:
        """Each sample's completion log-probability under the current policy (no gradient)."""
        logprobs, mask = self.logprobs(samples)
        return (logprobs * mask).sum(-1).tolist()

    def _old_logprobs(self, minibatch: list[TrainSample]) -> list:
        return [self._logprobs(b, grad=False)[0] for b in self._micro_batches(minibatch)]

    def _micro_batches(self, minibatch: list[TrainSample]) -> list[list[TrainSample]]:
        n = self.settings.micro_batch_size
        return [minibatch[i : i + n] for i in range(0, len(minibatch), n)]

    def _step(self, minibatch: list[TrainSample], old: list | None) -> UpdateResult:
        """One optimizer step over a mini-batch, accumulating gradients over its micro-batches."""
        tokens = sum(len(s.completion_ids) for s in minibatch)
        loss_sum, clip_sum, kl_sum = 0.0, 0.0, 0.0
        self.optimizer.zero_grad(set_to_none=True)
        for i, batch in enumerate(self._micro_batches(minibatch)):
            parts = self._batch_loss(batch, None if old is None else old[i], tokens)
            parts.loss.backward()
            weight = sum(len(s.completion_ids) for s in batch) / tokens
            loss_sum += float(parts.loss.item())
            clip_sum += parts.clip_fraction * weight
            kl_sum += parts.kl * weight
        grad_norm = clip_gradients(self.model, self.settings.max_grad_norm)
        self.optimizer.step()
        # Gradients are freed until the next step: generation and checkpoints run without them
        # (134.5 M parameters: 513 MB less between updates).
        self.optimizer.zero_grad(set_to_none=True)
        return UpdateResult(
            skipped=False,
            loss=loss_sum,
            grad_norm=float(grad_norm),
            clip_fraction=clip_sum,
            kl=kl_sum,
            tokens=tokens,
        )

    def _batch_loss(self, batch: list[TrainSample], old_logprobs, total_tokens: int):
        logprobs, mask = self._logprobs(batch, grad=True)
        # With one epoch the sampling policy is the current one: ratio 1, same gradient.
        old = logprobs.detach() if old_logprobs is None else old_logprobs
        ref = None
        if self.reference is not None:
            with torch.no_grad():
                ref = self._completion_logprobs(self.reference, batch)[0]
        advantages = torch.tensor([s.advantage for s in batch], device=logprobs.device)
        weights = torch.tensor([s.weight for s in batch], device=logprobs.device)
        shaping = torch.tensor([s.shaping for s in batch], device=logprobs.device)
        token_weights = self._importance_weights(batch, old, mask)
        return clipped_policy_loss(
            logprobs,
            old,
            advantages,
            mask,
            clip_low=self.settings.clip_low,
            clip_high=self.settings.clip_high,
            ref_logprobs=ref,
            kl_coef=self.settings.kl_coef,
            normalizer=total_tokens,
            weights=weights,
            shaping=shaping,
            token_weights=token_weights,
        )

    def _importance_weights(self, batch: list[TrainSample], old, mask) -> torch.Tensor | None:
        """The truncated importance weights of the batch's tokens, or None when off or moot."""
        cap = self.settings.importance_cap
        if cap <= 0 or not any(s.sampler_logprobs for s in batch):
            return None
        sampler = torch.full(mask.shape, float("nan"), device=mask.device)
        for row, sample in enumerate(batch):
            given = sample.sampler_logprobs[: mask.shape[1]]
            if given:
                sampler[row, : len(given)] = torch.tensor(given, device=mask.device)
        return truncated_importance_weights(old, sampler, mask, cap)

    def _logprobs(self, batch: list[TrainSample], grad: bool):
        """Per-token log-probs of each completion under the current model, plus its mask."""
        with torch.set_grad_enabled(grad):
            return self._completion_logprobs(self.model, batch)

    def _completion_logprobs(self, model, batch: list[TrainSample]):
        """Log-probs [B, C] of each completion's tokens under `model`, and the mask [B, C]."""
        device = next(model.parameters()).device
        dtype = self.autocast_dtype or torch.bfloat16
        autocast = torch.autocast(device.type, dtype=dtype, enabled=self.autocast_dtype is not None)
        shared = self.settings.shared_prefix and supports_shared_prefix(model)
        if shared and any(s.completion_ids for s in batch) and all(s.prompt_ids for s in batch):
            packed = pack_prefix_batch(
                [s.prompt_ids for s in batch],
                [s.completion_ids for s in batch],
                self.pad_id,
                device,
            )
            with autocast:
                hidden = prefix_hidden(model, packed)
                return hidden_logprobs(model, hidden, packed.completion_ids), packed.mask
        input_ids, attention, mask = pack_batch(batch, self.pad_id, device)
        # Positions count real tokens only, exactly as `generate` numbers left-padded prompts.
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        completion_len = mask.shape[1]
        with autocast:
            hidden = model.base_model(
                input_ids=input_ids, attention_mask=attention, position_ids=positions
            ).last_hidden_state
            # Position t predicts token t+1: keep the states that predict completion tokens.
            hidden = hidden[:, -completion_len - 1 : -1, :]
            return hidden_logprobs(model, hidden, input_ids[:, -completion_len:]), mask


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Turn on a Hugging Face model's gradient checkpointing (active in training mode only).

    Newer transformers name it activation checkpointing and warn at the old name's call."""
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
        return
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise ModelError(f"{type(model).__name__} has no gradient checkpointing")
    enable(gradient_checkpointing_kwargs=kwargs)


def fp32_master_weights(model: torch.nn.Module) -> torch.dtype | None:
    """Cast `model`'s floating-point weights to fp32 in place, if any is in lower precision.

    Returns the low-precision dtype the model was in (None if it was fp32 already): the
    trainer computes in that dtype under autocast while the optimizer updates fp32 weights.
    """
    low = {p.dtype for p in model.parameters() if p.is_floating_point()} - {torch.float32}
    if not low:
        return None
    model.float()
    return torch.bfloat16 if torch.bfloat16 in low else min(low, key=str)


def build_optimizer(model: torch.nn.Module, settings: TrainerSettings) -> torch.optim.Optimizer:
    """The optimizer `settings.optimizer` names, over the model's trainable parameters, with
    its moments in the dtype `settings.optimizer_state` names."""
    params = [p for p in model.parameters() if p.requires_grad]
    adam = OptimizerKind(settings.optimizer) == OptimizerKind.ADAM
    if OptimizerState(settings.optimizer_state) == OptimizerState.BF16:
        if adam:
            return Bf16StateAdam(params, lr=settings.lr)
        return Bf16StateAdam(
            params, lr=settings.lr, betas=(0.9, 0.99), weight_decay=settings.weight_decay
        )
    if adam:
        return torch.optim.Adam(params, lr=settings.lr)
    return torch.optim.AdamW(
        params, lr=settings.lr, weight_decay=settings.weight_decay, betas=(0.9, 0.99)
    )


def clip_gradients(model: torch.nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the gradients' total norm to `max_norm` (0: leave them); return the norm before."""
    limit = max_norm if max_norm > 0 else math.inf
    return torch.nn.utils.clip_grad_norm_(model.parameters(), limit)


def pack_batch(batch: list[TrainSample], pad_id: int, device):
    """Left-pad prompts and right-pad completions so all completions start at the same column.

    Returns input ids [B, P+C], attention mask [B, P+C] and completion mask [B, C].
    """
    prompt_len = max(len(s.prompt_ids) for s in batch)
    completion_len = max(len(s.completion_ids) for s in batch)
    size = (len(batch), prompt_len + completion_len)
    input_ids = torch.full(size, pad_id, dtype=torch.long)
    attention = torch.zeros(size, dtype=torch.long)
    mask = torch.zeros((len(batch), completion_len), dtype=torch.float32)
    for row, s in enumerate(batch):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        input_ids[row, prompt_len - p : prompt_len] = torch.tensor(s.prompt_ids, dtype=torch.long)
        attention[row, prompt_len - p : prompt_len + c] = 1
        if c:
            input_ids[row, prompt_len : prompt_len + c] = torch.tensor(
                s.completion_ids, dtype=torch.long
            )
            mask[row, :c] = 1.0
    return input_ids.to(device), attention.to(device), mask.to(device)
