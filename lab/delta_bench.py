"""The delta benchmark's run: synthetic RL-like steps at each density, a full anchor, real
tiny-model GRPO deltas and a libp2p transfer, printed as a table and written as JSON with the
machine's load (`lab.delta_measure` says what each figure is).
`scripts/bench_delta.py` runs it.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from lab.delta_measure import (
    FULL,
    MB,
    QUICK,
    bench_real_deltas,
    bench_transfer,
    measure,
    measure_anchor,
    qwen_like,
    rl_step,
    tiny_training_pairs,
    unique,
)
from swarm.policy.delta import encode_delta


def print_table(rows: list[dict], anchors: Sequence[dict] = ()) -> None:
    """Delta rows (and anchor rows) as a fixed-width table.

    MB/s are dense-bf16 MB per wall second; enc/cpu and app/cpu per CPU second summed over
    threads (what one core would do alone); +RSS is working memory added by the call.
    """
    head = (
        f"{'case':<24}{'changed':>9}{'bytes MB':>10}{'x dense':>9}{'x raw+i32':>10}"
        f"{'bit/chg':>8}{'enc MB/s':>9}{'apply MB/s':>11}{'rt MB/s':>8}"
        f"{'enc/cpu':>8}{'app/cpu':>8}{'+RSS enc':>9}{'+RSS app':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['label']:<24}{r['density']:>8.3%} {r['delta_bytes'] / MB:>10.3f}"
            f"{r['ratio_vs_dense']:>9.1f}{r['ratio_vs_raw_int32']:>10.2f}"
            f"{r['bits_per_change']:>8.2f}{r['encode_MBps']:>9.0f}{r['decode_apply_MBps']:>11.0f}"
            f"{r['roundtrip_MBps']:>8.0f}{r['encode_MB_per_cpu_s']:>8.0f}"
            f"{r['decode_apply_MB_per_cpu_s']:>8.0f}{r['added_rss_encode_MB']:>9.0f}"
            f"{r['added_rss_apply_MB']:>9.0f}"
        )
    for a in anchors:
        print(
            f"{a['label']:<24}{'all':>9}{a['anchor_bytes'] / MB:>10.1f}"
            f"{a['ratio_vs_dense']:>9.2f}{'':>10}{'':>8}{a['encode_MBps']:>9.0f}"
            f"{a['decode_MBps']:>11.0f}{'':>8}{'':>8}{'':>8}{a['added_rss_encode_MB']:>9.0f}"
            f"{a['added_rss_decode_MB']:>9.0f}"
        )


def time_transfers(payload: bytes) -> list[dict]:
    """`fetch_blob` of a realistic delta and of 64 MB between two libp2p transports."""
    transfers = []
    for label, blob in (("1% delta", payload), ("64 MB", os.urandom(64 << 20))):
        transfers.append({"label": label, **bench_transfer(blob)})
        t = transfers[-1]
        print(
            f"libp2p fetch_blob {label:>9}: {t['bytes'] / MB:8.2f} MB in {t['seconds']:.3f} s = {t['MBps']:.0f} MB/s"
        )
    return transfers


def machine(threads: int | None, load_at_start: tuple) -> dict:
    """Where the figures were measured."""
    return {
        "cpus": os.cpu_count(),
        "threads": threads or os.cpu_count(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        # Timings are wall-clock: a load above the core count means shared cores.
        "loadavg_at_start": load_at_start,
        "loadavg_at_end": os.getloadavg(),
    }


def run(args) -> int:
    """The whole benchmark for the options of `scripts/bench_delta.py` (quick, out, densities,
    repeat, threads, no_real, no_transfer)."""
    dims = QUICK if args.quick else FULL
    load_at_start = os.getloadavg()
    t0 = time.perf_counter()
    old = qwen_like(*dims)
    model = "qwen2.5-0.5b-like" if not args.quick else "quick"
    print(
        f"{model}: {sum(t.numel() for t in unique(old)) / 1e6:.1f}M params, built in "
        f"{time.perf_counter() - t0:.1f}s; load average {os.getloadavg()[0]:.2f}"
    )
    rng = np.random.default_rng(1)
    rows, payload = [], None
    for density in (float(d) for d in args.densities.split(",")):
        new = rl_step(old, density, rng)
        rows.append(measure(f"{model} {density:g}", old, new, args.repeat, args.threads))
        if payload is None or abs(density - 0.01) < 1e-9:
            payload = encode_delta(old, new, from_version=0, to_version=1)  # a realistic delta
        del new
    anchors = [measure_anchor(f"{model} anchor", old, 1, args.threads)]
    real = []
    if not args.no_real:
        for lr in (3e-4, 1e-5, 1e-6):  # the tiny model's own lr, and RL-sized ones
            pairs = tiny_training_pairs(3, lr)
            real += bench_real_deltas(pairs, repeat=args.repeat, label=f"tiny GRPO lr={lr:g}")
    print_table(rows + real, anchors)
    transfers = []
    if not args.no_transfer and payload is not None:
        transfers = time_transfers(payload)
    report = {
        "model": model,
        "dims": dict(
            zip(("vocab", "hidden", "intermediate", "layers", "kv_dim"), dims, strict=True)
        ),
        "machine": machine(args.threads, load_at_start),
        "synthetic": rows,
        "real": real,
        "anchors": anchors,
        "transfer": transfers,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0
