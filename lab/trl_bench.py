"""The TRL comparison's run: the three arms of `lab.trl_arms` alternating (or the
training pass alone, shared prefix on and off), printed and written as JSON under
results/trl/. `run` takes the options of `scripts/bench_trl.py` (shape, repeats, cpu_time,
train_only, out).
"""

from __future__ import annotations

import copy
import json
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.trl_arms import ARMS, CLOCK, LR, SHAPES, ours, setup_for, trl

ROOT = Path(__file__).resolve().parents[1]


def train_only(args) -> dict:
    """The training pass alone, shared prefix on and off, alternating: wall and CPU seconds.

    Completions are random tokens of exactly the shape's length, advantages random: no
    generation, so the two trainers see the same batch. CPU seconds (this process, one
    torch thread) are what a busy machine disturbs least.
    """
    import torch

    from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample

    torch.set_num_threads(1)
    shape = SHAPES[args.shape]
    setup = setup_for(args.shape, 1)
    rng = random.Random(1)
    vocab = min(setup.model.config.vocab_size, len(setup.tokenizer)) - 1
    samples = []
    for prompt in setup.prompts[0]:
        prompt_ids = tuple(setup.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        for _ in range(shape.group):
            completion = tuple(rng.randrange(2, vocab) for _ in range(shape.max_new_tokens))
            samples.append(TrainSample(prompt_ids, completion, rng.uniform(-1, 1)))
    trainers = {}
    for arm in ("shared", "plain"):
        settings = TrainerSettings(
            lr=LR, micro_batch_size=shape.micro_batch_size, shared_prefix=arm == "shared"
        )
        trainers[arm] = GRPOTrainer(copy.deepcopy(setup.model), 0, settings)
    timings: dict[str, list[dict]] = {"shared": [], "plain": []}
    for r in range(args.repeats + 1):
        for arm, trainer in trainers.items():
            wall, cpu = time.perf_counter(), time.process_time()
            trainer.update(samples)
            result = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
            print(f"repeat {r} {arm}: wall {result['wall']:.2f} s, cpu {result['cpu']:.2f} s")
            if r > 0:
                timings[arm].append(result)
    median = {a: {k: statistics.median(t[k] for t in rows) for k in ("wall", "cpu")}
              for a, rows in timings.items()}  # fmt: skip
    return {
        "shape": args.shape,
        "mode": "train-only",
        "shape_detail": asdict(shape),
        "parameters": sum(p.numel() for p in setup.model.parameters()),
        "prompt_tokens": [len(s.prompt_ids) for s in samples[:: shape.group]],
        "repeats_timed": args.repeats,
        "torch_threads": 1,
        "median_s": median,
        "plain_over_shared_wall": median["plain"]["wall"] / median["shared"]["wall"],
        "plain_over_shared_cpu": median["plain"]["cpu"] / median["shared"]["cpu"],
        "timings": timings,
    }


def rounds(args) -> dict:
    """The three arms alternating within each repeat, after one warm-up repeat: medians."""
    import torch

    if args.cpu_time:
        torch.set_num_threads(1)
        CLOCK["now"] = time.process_time
    shape = SHAPES[args.shape]
    repeats = args.repeats + 1  # the first is a warm-up, not counted
    setup = setup_for(args.shape, repeats)
    arms = {"shared": ours(setup, shape, True), "plain": ours(setup, shape, False)}
    arms["trl"] = trl(setup, shape)
    timings: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for r in range(repeats):
        for arm in ARMS:
            result = arms[arm](r)
            print(  # noqa: T201 - progress, one line per round
                f"repeat {r}{' (warm-up)' if r == 0 else ''} {arm}: round {result['round']:.2f} s, "
                f"generate {result['generate']:.2f} s, train {result['train']:.2f} s",
                flush=True,
            )
            if r > 0:
                timings[arm].append(result)
    completions = shape.questions * shape.group
    median = {
        arm: {k: statistics.median(t[k] for t in rows) for k in rows[0]}
        for arm, rows in timings.items()
    }
    return {
        "shape": args.shape,
        "shape_detail": asdict(shape),
        "parameters": sum(p.numel() for p in setup.model.parameters()),
        "repeats_timed": args.repeats,
        "clock": "cpu" if args.cpu_time else "wall",
        "torch_threads": torch.get_num_threads(),
        "median_s": median,
        "completions_per_s": {arm: completions / m["round"] for arm, m in median.items()},
        "trl_round_over_shared": median["trl"]["round"] / median["shared"]["round"],
        "plain_train_over_shared": median["plain"]["train"] / median["shared"]["train"],
        "plain_generate_over_shared": median["plain"]["generate"] / median["shared"]["generate"],
        "timings": timings,
    }


def show(result: dict, console: Console) -> None:
    detail = result["shape_detail"]
    table = Table(
        title=f"GRPO round, {result['shape']} ({result['parameters']:,} parameters), "
        f"{detail['questions']} x {detail['group']}, medians of {result['repeats_timed']}"
    )
    for column in ("arm", "round s", "generate s", "train s", "completions/s", "trained"):
        table.add_column(column, justify="right")
    for arm in ARMS:
        m = result["median_s"][arm]
        table.add_row(
            arm,
            f"{m['round']:.3f}",
            f"{m['generate']:.3f}",
            f"{m['train']:.3f}",
            f"{result['completions_per_s'][arm]:.1f}",
            f"{m['trained']:.0f}",
        )
    console.print(table)
    console.print(
        f"TRL round / shared round {result['trl_round_over_shared']:.2f}x · "
        f"plain train / shared train {result['plain_train_over_shared']:.2f}x · "
        f"plain generate / shared generate {result['plain_generate_over_shared']:.2f}x"
    )


def run(args) -> int:
    """Check TRL and the options, time the arms (or the training pass), print, write JSON."""
    console = Console()
    try:
        import trl  # noqa: F401
    except ImportError:
        console.print("error: TRL is not installed: pip install -e './lab[trl]'")
        return 2
    if args.repeats < 1:
        console.print("error: --repeats must be at least 1")
        return 2
    if args.train_only:
        result = train_only(args)
        console.print(
            f"training pass, {args.shape}: shared {result['median_s']['shared']}, plain "
            f"{result['median_s']['plain']}; plain / shared: wall "
            f"{result['plain_over_shared_wall']:.2f}x, cpu {result['plain_over_shared_cpu']:.2f}x"
        )
    else:
        result = rounds(args)
        show(result, console)
    name = f"{args.shape}-train" if args.train_only else args.shape
    name += "-cpu" if args.cpu_time and not args.train_only else ""
    out = Path(args.out or ROOT / "results" / "trl" / f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {out}")
    return 0
