"""Benchmark of `swarm.policy.delta`: delta size and speed on a model-sized weight set.

What it measures, on what and how, is said once: in `scripts/bench_delta.py`'s help.
`lab.delta_bench` runs it for `scripts/bench_delta.py`.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from swarm.policy.delta import (
    apply_delta,
    bf16_state_dict,
    decode_anchor,
    encode_anchor,
    encode_delta,
    read_header,
)

MB = 1e6

# (vocab, hidden, intermediate, layers, kv_dim): Qwen2.5-0.5B and a small stand-in.
FULL = (151936, 896, 4864, 24, 128)
QUICK = (32000, 512, 1408, 4, 128)


# --------------------------------------------------------------------------- weights


def qwen_like(vocab: int, hidden: int, inter: int, layers: int, kv: int, seed: int = 0):
    """bf16 weights shaped like a Qwen2 model, lm_head tied to the embedding."""
    gen = torch.Generator().manual_seed(seed)
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (hidden, hidden),
            p + "self_attn.q_proj.bias": (hidden,),
            p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.k_proj.bias": (kv,),
            p + "self_attn.v_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.bias": (kv,),
            p + "self_attn.o_proj.weight": (hidden, hidden),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }
    shapes["model.norm.weight"] = (hidden,)
    weights = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            t = 1.0 + 0.05 * torch.randn(shape, generator=gen)
        else:
            t = 0.02 * torch.randn(shape, generator=gen)
        weights[name] = t.to(torch.bfloat16)
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    return weights


def clone_weights(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Deep copy that keeps tied names tied."""
    out, seen = {}, {}
    for name, t in weights.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key not in seen:
            seen[key] = t.clone()
        out[name] = seen[key]
    return out


def unique(weights: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
    seen, out = set(), []
    for t in weights.values():
        if t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            out.append(t)
    return out


def rl_step(weights: Mapping[str, torch.Tensor], density: float, rng: np.random.Generator):
    """A copy of `weights` with a `density` share of positions nudged by 1 or 2 ulp.

    Positions form a Bernoulli(density) process (geometric gaps). The nudge moves the
    magnitude up or down by 1 ulp (85%) or 2 ulp (15%) keeping the sign, which is what
    an Adam step of size ~lr does to a bf16 weight whose fp32 master crossed a rounding
    boundary.
    """
    new = clone_weights(weights)
    for t in unique(new):
        bits = t.view(torch.int16).numpy().reshape(-1).view(np.uint16)
        n = bits.size
        if density <= 0 or n == 0:
            continue
        gaps = rng.geometric(density, size=int(n * density * 1.2) + 64)
        idx = np.cumsum(gaps) - 1
        idx = idx[idx < n]
        mag = (bits[idx] & 0x7FFF).astype(np.int32)
        step = np.where(rng.random(idx.size) < 0.85, 1, 2) * rng.choice([-1, 1], idx.size)
        bad = (mag + step < 0) | (mag + step >= 0x7F80)  # would cross zero or reach inf
        step[bad] = -step[bad]
        bits[idx] = (bits[idx] & 0x8000) | (mag + step).astype(np.uint16)
    return new


# --------------------------------------------------------------------------- measuring


def _reset_peak_rss() -> None:
    # Linux: writing 5 to clear_refs resets VmHWM, so each phase gets its own peak.
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _rss_mb(field: str) -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / MB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


def _timed(fn: Callable[[], object], repeat: int, setup: Callable[[], None] | None = None):
    """Run `fn` `repeat` times (after `setup` each time, untimed).

    Returns (best wall seconds, least CPU seconds summed over threads, peak process RSS in
    MB, most RSS added above the RSS just before a call in MB, result of the last call).
    CPU seconds barely move when other processes share the cores, wall seconds do. The
    added RSS is the working memory the call needs on top of the weights already held
    (approximate: memory the allocator recycles from earlier calls does not show).
    """
    best, cpu, peak, added, result = float("inf"), float("inf"), 0.0, 0.0, None
    for _ in range(repeat):
        result = None  # free the previous result before taking the baseline
        if setup:
            setup()
        baseline = _rss_mb("VmRSS")
        _reset_peak_rss()
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
        high = _rss_mb("VmHWM")
        peak, added = max(peak, high), max(added, high - baseline)
    return best, cpu, peak, added, result


def same_bits(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k].view(torch.int16), b[k].view(torch.int16)) for k in a
    )


def measure(label: str, old, new, repeat: int = 3, threads: int | None = None) -> dict:
    """Size and speed of one old -> new delta, checked bit-exact."""
    dense = sum(t.numel() for t in unique(new)) * 2
    enc_s, enc_cpu, enc_peak, enc_added, blob = _timed(
        lambda: encode_delta(old, new, from_version=0, to_version=1, threads=threads), repeat
    )
    info = read_header(blob)
    target: dict[str, torch.Tensor] = {}

    def fresh_target() -> None:
        target.clear()
        target.update(clone_weights(old))

    dec_s, dec_cpu, dec_peak, dec_added, _ = _timed(
        lambda: apply_delta(target, blob, threads=threads), repeat, fresh_target
    )
    if not same_bits(target, new):
        raise AssertionError(f"{label}: applied weights differ from the new weights")
    target.clear()
    codings = sorted(
        {(t.index_coding, t.value_coding) for t in info.tensors if t.count and not t.alias_of}
    )
    return {
        "label": label,
        "params": dense // 2,
        "changed": info.changed,
        "density": info.changed / max(1, dense // 2),
        "dense_bytes": dense,
        "delta_bytes": info.nbytes,
        "raw_int32_bytes": info.changed * 6,
        "ratio_vs_dense": dense / info.nbytes,
        "ratio_vs_raw_int32": info.changed * 6 / info.nbytes,
        "bits_per_change": info.nbytes * 8 / max(1, info.changed),
        "encode_s": enc_s,
        "decode_apply_s": dec_s,
        "encode_MBps": dense / MB / enc_s,
        "decode_apply_MBps": dense / MB / dec_s,
        "roundtrip_MBps": dense / MB / (enc_s + dec_s),
        "encode_cpu_s": enc_cpu,
        "decode_apply_cpu_s": dec_cpu,
        "encode_MB_per_cpu_s": dense / MB / enc_cpu,
        "decode_apply_MB_per_cpu_s": dense / MB / dec_cpu,
        "peak_rss_encode_MB": enc_peak,
        "peak_rss_apply_MB": dec_peak,
        "added_rss_encode_MB": enc_added,
        "added_rss_apply_MB": dec_added,
        "codings": [f"{i}/{v}" for i, v in codings],
    }


def measure_anchor(label: str, weights, repeat: int = 1, threads: int | None = None) -> dict:
    """Size and speed of a full anchor of `weights`, checked bit-exact."""
    dense = sum(t.numel() for t in unique(weights)) * 2
    enc_s, enc_cpu, enc_peak, enc_added, blob = _timed(
        lambda: encode_anchor(weights, version=0, threads=threads), repeat
    )
    dec_s, dec_cpu, dec_peak, dec_added, (decoded, _) = _timed(
        lambda: decode_anchor(blob, threads=threads), repeat
    )
    if not same_bits(decoded, weights):
        raise AssertionError(f"{label}: decoded anchor differs")
    return {
        "label": label,
        "params": dense // 2,
        "dense_bytes": dense,
        "anchor_bytes": len(blob),
        "ratio_vs_dense": dense / len(blob),
        "encode_s": enc_s,
        "decode_s": dec_s,
        "encode_MBps": dense / MB / enc_s,
        "decode_MBps": dense / MB / dec_s,
        "encode_cpu_s": enc_cpu,
        "decode_cpu_s": dec_cpu,
        "peak_rss_encode_MB": enc_peak,
        "peak_rss_decode_MB": dec_peak,
        "added_rss_encode_MB": enc_added,
        "added_rss_decode_MB": dec_added,  # includes the decoded weights themselves
    }


def bench_real_deltas(
    pairs: Iterable[tuple[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]]],
    repeat: int = 3,
    label: str = "real",
) -> list[dict]:
    """Measure deltas between real (old_state_dict, new_state_dict) pairs.

    State dicts may hold fp32 masters; both sides are cast to bf16 as a publisher would
    (`bf16_state_dict`). Returns one row per pair, in the format of the synthetic rows,
    ready for `print_table` and the JSON report. For example, around a training loop::

        before = {k: v.clone() for k, v in model.state_dict().items()}
        trainer.step(...)
        rows = bench_real_deltas([(before, model.state_dict())])
    """
    rows = []
    for i, (old_sd, new_sd) in enumerate(pairs):
        old, new = bf16_state_dict(old_sd), bf16_state_dict(new_sd)
        rows.append(measure(f"{label}[{i}]", old, new, repeat=repeat))
    return rows


def tiny_training_pairs(steps: int, lr: float, seed: int = 0) -> list[tuple[dict, dict]]:
    """(bf16 before, bf16 after) of `steps` real GRPO updates of the tiny model (CPU, fp32
    masters), run as a solo node's rounds in a temporary folder."""
    import tempfile

    from swarm.config import build_config
    from swarm.core.identity import create_identity, peer_id_of
    from swarm.node import Node
    from swarm.p2p.transport import MemoryTransport

    with tempfile.TemporaryDirectory() as tmp:
        config = build_config(
            {
                "node": {"name": "bench", "run_dir": tmp, "seed": seed, "checkpoint_every": 1000},
                "policy": {"device": "cpu", "dtype": "float32"},
                "generation": {
                    "questions_per_round": 16,
                    "completions_per_question": 8,
                    "max_new_tokens": 8,
                },
                "training": {"lr": lr, "own_groups": 16},
                "tasks": {"eval_size": 0},
            },
            "bench",
        )
        key = create_identity()
        node = Node(config, transport=MemoryTransport(peer_id_of(key)), key_pair=key)
        node.start()
        pairs: list[tuple[dict, dict]] = []
        before = bf16_state_dict(node.policy.model)
        while len(pairs) < steps:
            report = node.run_round()
            if report.skipped:
                continue
            after = bf16_state_dict(node.policy.model)
            pairs.append((before, after))
            before = after
        node.close()
    return pairs


def bench_transfer(payload: bytes, repeat: int = 3) -> dict:
    """MB/s of `fetch_blob` of `payload` from one Libp2pTransport to another on 127.0.0.1."""
    from swarm.core.identity import create_identity
    from swarm.p2p.libp2p import Libp2pTransport, TransportSettings

    loopback = TransportSettings(listen_addr="/ip4/127.0.0.1/tcp/0")
    server = Libp2pTransport(loopback, key_pair=create_identity())
    server.start()
    client = None
    try:
        client = Libp2pTransport(
            replace(loopback, bootstrap=tuple(server.listen_addrs())), key_pair=create_identity()
        )
        client.start()
        deadline = time.monotonic() + 30
        while not client.peers() and time.monotonic() < deadline:
            time.sleep(0.1)
        server.serve_blob("bench", payload)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            got = client.fetch_blob(server.peer_id, "bench", timeout=600)
            best = min(best, time.perf_counter() - t0)
            if got != payload:
                raise AssertionError("fetched blob differs")
    finally:
        if client is not None:
            client.close()
        server.close()
    return {"bytes": len(payload), "seconds": best, "MBps": len(payload) / MB / best}
