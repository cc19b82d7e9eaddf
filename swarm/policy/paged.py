"""Paged decoding: continuous batching whose decode step costs each sequence its own context.

transformers' continuous batching (5.17 to 5.25) attends with sdpa or eager over one packed
row: every query of a step sees the keys of every sequence in the step (the sum of their
contexts) and a dense block-diagonal mask hides all but its own. N sequences of context L
cost N x N*L per decode step, and the mask is allocated for the whole cache. Its per-sequence
paths (flash varlen, flash with a block table) need the flash-attn kernels: CUDA only.

`PagedDecoder` keeps that scheme -- the key/value cache in pages of `PAGE_TOKENS` tokens,
requests joining the batch as others finish -- with its own attention function, registered
through transformers' public `AttentionInterface` (a model switches to it with
`set_attn_implementation`, which also turns transformers' mask building off): each row's
queries read only its own pages, gathered into a [rows, longest context] block. A decode
step of N sequences costs N x the longest context, its mask is that block's, and the cache
holds what the running sequences reserve (prompt + `max_new_tokens` each), never more.

The completions of one prompt share its prefill: the prompt runs once, the others take its
full pages by reference and copy the partial last one. Sampling follows transformers'
order (temperature, top-k, top-p); the log-prob returned for each token is the raw model's
(temperature 1, no top-p/top-k), as `Completion.logprobs` is defined. Works on any device;
the module runs in whatever dtype it has (`swarm.policy.continuous` picks it).
"""

from __future__ import annotations

import inspect
import math
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from swarm.core.errors import GeneratorError

ATTENTION = "swarm_paged"  # the name the attention function is registered under
PAGE_TOKENS = 16  # tokens a page holds: the granularity of a row's gathered context
UNSUPPORTED = ("sliding_window", "softcap", "s_aux")  # attention variants this path lacks


def register_attention() -> None:
    """Make `ATTENTION` an attention implementation a transformers model can switch to."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, paged_attention)


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
    """transformers' attention interface: the step's plan (`paged_step`) does the work."""
    step = kw.get("paged_step")
    if step is None:
        raise GeneratorError(f"attention '{ATTENTION}' runs only inside a PagedDecoder step")
    unsupported = [name for name in UNSUPPORTED if kw.get(name) is not None]
    if unsupported or hasattr(module, "sinks"):
        raise GeneratorError(f"paged decoding does not support {unsupported or ['sinks']}")
    return step.attend(module.layer_idx, query, key, value, scaling)


class PagedCache:
    """Keys and values of every layer in pages; page 0 takes padding's writes, never handed out."""

    def __init__(self, pages: int, page_tokens: int = PAGE_TOKENS):
        self.page_tokens = page_tokens
        self.pages = pages
        self.free = list(range(pages - 1, 0, -1))
        self.refs = [0] * pages
        self.layers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def layer(self, index: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `index`'s [slots, kv heads, head dim] keys and values, made at first use."""
        if index not in self.layers:
            shape = (self.pages * self.page_tokens, like.shape[1], like.shape[3])
            self.layers[index] = (like.new_zeros(shape), like.new_zeros(shape))
        return self.layers[index]

    def take(self, count: int) -> list[int]:
        if count > len(self.free):
            raise GeneratorError(f"paged cache full: {count} pages wanted, {len(self.free)} free")
        taken = [self.free.pop() for _ in range(count)]
        self.share(taken)
        return taken

    def share(self, pages: list[int]) -> None:
        for page in pages:
            self.refs[page] += 1

    def release(self, pages: list[int]) -> None:
        for page in pages:
            self.refs[page] -= 1
            if self.refs[page] == 0:
                self.free.append(page)

    def slots(self, pages: list[int], start: int, stop: int) -> list[int]:
        """Cache slots of positions [start, stop) of a sequence holding `pages`."""
        p = self.page_tokens
        return [pages[i // p] * p + i % p for i in range(start, stop)]

    def copy(self, source: list[int], target: list[int]) -> None:
        """Copy the keys and values at slots `source` to slots `target`, in every layer."""
        if not source:
            return
        for keys, values in self.layers.values():
            src = torch.tensor(source, device=keys.device)
            dst = torch.tensor(target, device=keys.device)
            keys[dst] = keys[src]
            values[dst] = values[src]

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for kv in self.layers.values() for t in kv)


class Step:
    """One forward pass: B rows of T new tokens (left-padded), each with its context in the
    cache. `write` [B*T]: the slot of each new token (padding: slot 0); `read` [B, L]: the
    slots of each row's context, L its longest; `mask` [B, 1, T, L]: what each query sees."""

    def __init__(self, cache: PagedCache, write, read, mask):
        self.cache, self.write, self.read, self.mask = cache, write, read, mask

    def attend(self, layer: int, query, key, value, scaling):
        keys, values = self.cache.layer(layer, key)
        rows, kv_heads, new, dim = key.shape
        keys.index_copy_(0, self.write, key.transpose(1, 2).reshape(rows * new, kv_heads, dim))
        values.index_copy_(0, self.write, value.transpose(1, 2).reshape(rows * new, kv_heads, dim))
        context = (rows, self.read.shape[1], kv_heads, dim)  # [B, L, ...]: this row's only
        k = keys.index_select(0, self.read.reshape(-1)).view(context).transpose(1, 2)
        v = values.index_select(0, self.read.reshape(-1)).view(context).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            query, k, v, attn_mask=self.mask, scale=scaling, enable_gqa=query.shape[1] != kv_heads
        )
        return out.transpose(1, 2).contiguous(), None


def plan_step(cache: PagedCache, rows: list[tuple[list[int], int, list[int]]], device):
    """Input ids, positions and the `Step` for `rows` of (pages, tokens already cached, new
    tokens). Built on `device` from the rows' page tables: sizes [B, T] and [B, L] only."""
    p = cache.page_tokens
    width = max(len(new) for _, _, new in rows)
    past = torch.tensor([cached for _, cached, _ in rows], device=device)
    count = torch.tensor([len(new) for _, _, new in rows], device=device)
    context = past + count
    longest = int(max(cached + len(new) for _, cached, new in rows))
    pages = math.ceil(longest / p)
    table = torch.tensor([(pg[:pages] + [0] * pages)[:pages] for pg, _, _ in rows], device=device)
    ids = torch.tensor([[0] * (width - len(new)) + new for _, _, new in rows], device=device)
    t = torch.arange(width, device=device)
    real = t[None, :] >= (width - count)[:, None]  # [B, T]
    positions = torch.where(real, past[:, None] + t[None, :] - (width - count)[:, None], 0)
    j = torch.arange(longest, device=device)
    read = table[:, j // p] * p + j % p  # [B, L]
    write = torch.where(real, read.gather(1, positions), 0).reshape(-1)
    seen = (j[None, None, :] <= positions[:, :, None]) & (j[None, None, :] < context[:, None, None])
    mask = torch.where(real[:, :, None], seen, j[None, None, :] == 0)  # padding sees key 0
    return ids, positions, Step(cache, write, read, mask[:, None])


def sample(logits: torch.Tensor, temperature: float, top_p: float, top_k: int):
    """Next tokens [B] from `logits` [B, V] (temperature 0: argmax; then top-k, top-p as
    transformers applies them) and each one's raw log-prob (temperature 1, unfiltered)."""
    logits = logits.float()
    raw = torch.log_softmax(logits, dim=-1)
    if temperature <= 0:
        tokens = logits.argmax(dim=-1)
    else:
        scores = logits / temperature
        if top_k > 0:
            kth = torch.topk(scores, min(top_k, scores.shape[-1])).values[:, -1:]
            scores = scores.masked_fill(scores < kth, -math.inf)
        if top_p < 1.0:
            ordered, order = torch.sort(scores, descending=False)
            cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
            drop = cumulative <= 1 - top_p
            drop[:, -1] = False  # the likeliest token always stays
            scores = scores.masked_fill(drop.scatter(1, order, drop), -math.inf)
        tokens = torch.multinomial(scores.softmax(dim=-1), 1).squeeze(-1)
    return tokens, raw.gather(-1, tokens[:, None]).squeeze(-1)


def chunks(sequences: list, budget: int) -> list[list]:
    """`sequences` in order, cut into runs whose left-padded prompts (rows x the longest)
    fit `budget` tokens; a prompt longer than the budget runs alone."""
    out: list[list] = []
    for s in sequences:
        run = out[-1] if out else []
        if run and (len(run) + 1) * max(len(s.prompt), *(len(r.prompt) for r in run)) <= budget:
            run.append(s)
        else:
            out.append([s])
    return out


@dataclass
class Sequence:
    """One request: its prompt, its pages, what it has sampled so far."""

    index: int
    prompt: list[int]
    pages: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class PagedDecoder:
    """Continuous batching over `model` with paged attention (module docstring): at most
    `max_sequences` decode at once; a prefill runs at most `max_batch_tokens` tokens."""

    def __init__(self, model, max_sequences: int, max_batch_tokens: int, page_tokens=PAGE_TOKENS):
        self.model = model
        self.max_sequences = max_sequences
        self.max_batch_tokens = max_batch_tokens
        self.page_tokens = page_tokens
        self.peak_cache_bytes = 0  # the largest cache a run held
        forward = inspect.signature(model.forward).parameters
        self._keep = {"logits_to_keep": 1} if "logits_to_keep" in forward else {}

    def run(self, prompts, n, params, stop_ids) -> list[Sequence]:
        """`n` sequences for each prompt (token ids), in prompt order, each cut at its first
        stop token (kept) or at `params.max_new_tokens`."""
        register_attention()
        requests = deque(
            Sequence(i * n + j, list(p)) for i, p in enumerate(prompts) for j in range(n)
        )
        if any(not s.prompt for s in requests):
            raise GeneratorError("paged decoding needs at least one prompt token")
        if not requests or params.max_new_tokens < 1:
            return list(requests)
        longest = max(len(s.prompt) for s in requests) + params.max_new_tokens
        per_sequence = math.ceil(longest / self.page_tokens)
        self.cache = PagedCache(1 + min(len(requests), self.max_sequences) * per_sequence)
        done: list[Sequence] = []
        running: list[Sequence] = []
        original = getattr(self.model.config, "_attn_implementation", None)
        self.model.set_attn_implementation(ATTENTION)
        try:
            while requests or running:
                admitted: list[Sequence] = []
                while requests and len(running) + len(admitted) < self.max_sequences:
                    admitted.append(requests.popleft())
                running += self._prefill(admitted, params)
                self._retire(running, done, params, stop_ids)
                if running:
                    self._decode(running, params)
                    self._retire(running, done, params, stop_ids)
        finally:
            self.peak_cache_bytes = max(self.peak_cache_bytes, self.cache.bytes)
            self.model.set_attn_implementation(original)
            del self.cache
        return sorted(done, key=lambda s: s.index)

    def _retire(self, running: list[Sequence], done: list[Sequence], params, stop_ids) -> None:
        """Move the sequences that sampled a stop token or their last token to `done`."""
        for s in [
            s for s in running if len(s.tokens) >= params.max_new_tokens or s.tokens[-1] in stop_ids
        ]:
            running.remove(s)
            self.cache.release(s.pages)
            done.append(s)

    def _forward(self, rows) -> torch.Tensor:
        """Logits [B, V] of the last new token of each row."""
        device = next(self.model.parameters()).device
        ids, positions, step = plan_step(self.cache, rows, device)
        out = self.model(
            input_ids=ids, position_ids=positions, use_cache=False, paged_step=step, **self._keep
        )
        return out.logits[:, -1, :]

    def _prefill(self, admitted: list[Sequence], params) -> list[Sequence]:
        """Prefill each distinct prompt once; the other sequences of a prompt take its pages
        (the full ones shared, the partial one copied). Each admitted sequence gets its first
        token."""
        groups: dict[tuple[int, ...], list[Sequence]] = {}
        for s in admitted:
            groups.setdefault(tuple(s.prompt), []).append(s)
        leaders = [g[0] for g in groups.values()]
        p, budget = self.page_tokens, self.max_batch_tokens
        need = [math.ceil((len(s.prompt) + params.max_new_tokens) / p) for s in leaders]
        for s, pages in zip(leaders, need, strict=True):
            s.pages = self.cache.take(pages)
        for chunk in chunks(leaders, budget):
            logits = self._forward([(s.pages, 0, s.prompt) for s in chunk])
            rows, members = [], []
            for r, leader in enumerate(chunk):
                group = groups[tuple(leader.prompt)]
                for s in group[1:]:
                    self._fork(leader, s, params)
                rows += [r] * len(group)
                members += group
            self._sample(logits[torch.tensor(rows, device=logits.device)], members, params)
        return admitted

    def _fork(self, leader: Sequence, s: Sequence, params) -> None:
        full = len(leader.prompt) // self.page_tokens
        own = math.ceil((len(s.prompt) + params.max_new_tokens) / self.page_tokens) - full
        self.cache.share(leader.pages[:full])
        s.pages = leader.pages[:full] + self.cache.take(own)
        begin, end = full * self.page_tokens, len(s.prompt)
        self.cache.copy(
            self.cache.slots(leader.pages, begin, end), self.cache.slots(s.pages, begin, end)
        )

    def _decode(self, running: list[Sequence], params) -> None:
        rows = [(s.pages, len(s.prompt) + len(s.tokens) - 1, s.tokens[-1:]) for s in running]
        self._sample(self._forward(rows), running, params)

    @staticmethod
    def _sample(logits, sequences: list[Sequence], params) -> None:
        tokens, logprobs = sample(logits, params.temperature, params.top_p, params.top_k)
        for s, token, logprob in zip(sequences, tokens.tolist(), logprobs.tolist(), strict=True):
            s.tokens.append(token)
            s.logprobs.append(logprob)
