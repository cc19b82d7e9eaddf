"""The memory plan against measured peaks: `swarm-node join` processes run a few rounds
under several configs, each beside the plan `swarm-node config --plan` makes for it.

What it measures, on what and how, is said once: in `scripts/bench_memory_plan.py`'s help.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from swarm.policy.memory import MB, Phase

# Each case: a name and its --set overrides (on top of the command line's).
LARGE = (
    "generation.questions_per_round=32",
    "training.own_groups=32",
    "generation.max_new_tokens=64",
)
CASES: dict[str, tuple[str, ...]] = {
    "default": (),
    "large": (*LARGE, "training.micro_batch_size=256"),
    "large, checkpointing": (
        *LARGE,
        "training.micro_batch_size=256",
        "training.gradient_checkpointing=on",
    ),
    "large, plain path": (*LARGE, "training.micro_batch_size=256", "training.shared_prefix=false"),
    "large, micro-batches of 32": (*LARGE, "training.micro_batch_size=32"),
    "large, auto": (*LARGE, "training.micro_batch_size=auto"),
}
POLL_S = 0.1


@dataclass(frozen=True)
class Outcome:
    """One case: the plan's peak and parts, and what the processes reached."""

    case: str
    sets: tuple[str, ...]
    micro_batch: int
    before_mb: float  # the plan `config --plan` makes before the start (worst-case sizes)
    planned_mb: float  # the plan at the sizes the run reached, the verification worker included
    planned_worker_mb: float
    node_mb: float  # the join process's peak RSS
    worker_mb: float  # the verification worker's peak RSS
    seconds: float
    reached: dict[str, int]  # the sizes the run reached (`Sizes`)
    parts: dict[str, float]  # the plan's parts at those sizes

    @property
    def measured_mb(self) -> float:
        return self.node_mb + self.worker_mb

    @property
    def error(self) -> float:
        """The plan's peak over the measured one, less one (0.1: 10 % above)."""
        return self.planned_mb / self.measured_mb - 1


def plan_of(config: str | None, sets: list[str]):
    """The plan `swarm-node config --plan` makes for this config file and overrides."""
    from swarm.config.load import load_config
    from swarm.config.memory import config_plan

    planned = config_plan(load_config(config, sets))
    if planned is None:
        raise SystemExit("no memory plan for this model: its config.json is not on this machine")
    return planned


def at_sizes(planned, reached: dict[str, int]):
    """The same plan at the sizes a run reached (`Sizes.reached`)."""
    from swarm.policy.memory import estimate

    work = replace(
        planned.work,
        prompt_tokens=reached["prompt_tokens"],
        new_tokens=reached["new_tokens"],
        generate_rows=reached["generate_rows"],
        update_rows=reached["update_rows"],
        micro_batch=reached["micro_batch"],
    )
    return estimate(planned.shape, work, planned.setup)


def measure(
    case: str, config: str | None, sets: list[str], rounds: int, full_length: bool
) -> Outcome:
    """Plan, run `swarm-node join` for `rounds` rounds, take its peaks and the sizes it
    reached, and plan again at those sizes."""
    before = plan_of(config, sets)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        start = time.perf_counter()
        node_kb, worker_kb, reached = run_join(Path(tmp), config, sets, rounds, full_length)
        seconds = time.perf_counter() - start
    plan = at_sizes(before, reached)
    worker = next((p.bytes for p in plan.parts if p.name == "verification worker"), 0)
    return Outcome(
        case=case,
        sets=tuple(sets),
        micro_batch=before.work.micro_batch,
        before_mb=round(before.plan.peak() / MB, 1),
        planned_mb=round(plan.peak() / MB, 1),
        planned_worker_mb=round(worker / MB, 1),
        node_mb=round(node_kb / 1024, 1),
        worker_mb=round(worker_kb / 1024, 1),
        seconds=round(seconds, 1),
        reached=reached,
        parts={p.name: round(p.bytes / MB, 1) for p in plan.parts if p.phase is not Phase.UNUSED},
    )


def run_join(
    run_dir: Path, config: str | None, sets: list[str], rounds: int, full_length: bool
) -> tuple[int, int, dict[str, int]]:
    """Run a solo `swarm-node join` to its end in a child (`child_main`); (its peak RSS, its
    children's, in KB; the sizes it reached)."""
    argv = ["join", "--run-dir", str(run_dir), "--listen", "/ip4/127.0.0.1/tcp/0"]
    argv += ["--config", str(Path(config).resolve())] if config else []
    argv += ["--rounds", str(rounds), "--display", "none"]
    for s in sets:
        argv += ["--set", s]
    sizes = run_dir / "bench-sizes.json"
    spec = json.dumps({"argv": argv, "sizes": str(sizes), "full_length": full_length})
    log = run_dir / "bench-join.log"
    with open(log, "w") as out:
        cmd = [sys.executable, "-m", "lab.memory_plan", spec]
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        children = ChildPeaks(proc.pid)
        children.start()
        _, status, usage = os.wait4(proc.pid, 0)  # ru_maxrss: the process's own peak, in KB
        proc.returncode = os.waitstatus_to_exitcode(status)
        children.stop()
    if proc.returncode != 0:
        raise SystemExit(f"join exited with {proc.returncode}: {log.read_text()[-2000:]}")
    return usage.ru_maxrss, children.peak_kb, json.loads(sizes.read_text())


# -- the child: swarm-node join, with the sizes it reaches recorded ---------------------------


class Sizes:
    """The largest sizes a run reaches: a generate call's rows, a training pass's rows and
    tokens, an update's rows. Recorded by wrapping the generator's and trainer's methods."""

    def __init__(self) -> None:
        self.reached = dict.fromkeys(
            ("prompt_tokens", "new_tokens", "generate_rows", "update_rows", "micro_batch"), 1
        )

    def note(self, key: str, value: int) -> None:
        self.reached[key] = max(self.reached[key], int(value))

    def install(self, full_length: bool) -> Callable[[], None]:
        """Wrap `GenerationMixin.generate` (with `full_length`: no completion stops before
        max_new_tokens, as the plan assumes) and the trainer's update and passes; returns
        what puts them back."""
        from transformers import GenerationMixin

        from swarm.policy.trainer import GRPOTrainer

        generate, update = GenerationMixin.generate, GRPOTrainer.update
        passes = GRPOTrainer._completion_logprobs

        def sized_generate(model, *args, **kwargs):
            if full_length and kwargs.get("max_new_tokens"):
                kwargs["min_new_tokens"] = kwargs["max_new_tokens"]
            rows = kwargs.get("input_ids")
            if rows is not None:
                self.note("generate_rows", rows.shape[0])
            return generate(model, *args, **kwargs)

        def sized_update(trainer, samples):
            self.note("update_rows", sum(1 for s in samples if s.advantage and s.completion_ids))
            return update(trainer, samples)

        def sized_pass(trainer, model, batch):
            if model is trainer.model and torch_grad_enabled():
                self.note("micro_batch", len(batch))
                self.note("prompt_tokens", max(len(s.prompt_ids) for s in batch))
                self.note("new_tokens", max(len(s.completion_ids) for s in batch))
            return passes(trainer, model, batch)

        setattr(GenerationMixin, "generate", sized_generate)  # noqa: B010 - wrapping a method
        setattr(GRPOTrainer, "update", sized_update)  # noqa: B010
        setattr(GRPOTrainer, "_completion_logprobs", sized_pass)  # noqa: B010

        def put_back() -> None:
            setattr(GenerationMixin, "generate", generate)  # noqa: B010
            setattr(GRPOTrainer, "update", update)  # noqa: B010
            setattr(GRPOTrainer, "_completion_logprobs", passes)  # noqa: B010

        return put_back


def torch_grad_enabled() -> bool:
    import torch

    return torch.is_grad_enabled()


def child_main(spec: dict) -> int:
    """Run the `swarm-node` program (`python -m swarm.cli`) as `spec["argv"]` says,
    recording the sizes it reaches."""
    import runpy

    sizes = Sizes()
    sizes.install(spec["full_length"])
    sys.argv = ["swarm-node", *spec["argv"]]
    try:
        runpy.run_module("swarm.cli", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    Path(spec["sizes"]).write_text(json.dumps(sizes.reached))
    return code


class ChildPeaks:
    """Polls the peak RSS (VmHWM) of a process's children until stopped; keeps the largest."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peaks: dict[int, int] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="child-peaks", daemon=True)

    @property
    def peak_kb(self) -> int:
        return max(self.peaks.values(), default=0)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def _poll(self) -> None:
        while not self.done.wait(POLL_S):
            for child in children_of(self.pid):
                peak = vm_hwm_kb(child)
                if peak:
                    self.peaks[child] = max(self.peaks.get(child, 0), peak)


def children_of(pid: int) -> list[int]:
    """The process's children (Linux: /proc/PID/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def vm_hwm_kb(pid: int) -> int:
    """A process's peak resident set size in KB (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def table(outcomes: list[Outcome]) -> list[str]:
    """One row per case: planned against measured peaks, in MB."""
    head = (
        f"{'case':<28} {'micro':>5} {'rows':>5} {'tokens':>7} {'before':>7} {'planned':>8} "
        f"{'node':>7} {'worker':>7} {'measured':>9} {'error':>7}"
    )
    rows = [head]
    for o in outcomes:
        r = o.reached
        tokens = f"{r['prompt_tokens']}+{r['new_tokens']}"
        rows.append(
            f"{o.case:<28} {r['micro_batch']:>5} {r['update_rows']:>5} {tokens:>7} "
            f"{o.before_mb:>7.0f} {o.planned_mb:>8.0f} {o.node_mb:>7.0f} {o.worker_mb:>7.0f} "
            f"{o.measured_mb:>9.0f} {o.error:>+7.1%}"
        )
    return rows


def replanned(case: dict) -> Outcome:
    """A recorded case planned again with the current code, at the sizes it reached."""
    before = plan_of(case.get("config"), list(case["sets"]))
    plan = at_sizes(before, case["reached"])
    worker = next((p.bytes for p in plan.parts if p.name == "verification worker"), 0)
    fields = {k: v for k, v in case.items() if k in Outcome.__dataclass_fields__}
    return Outcome(
        **fields
        | {
            "sets": tuple(case["sets"]),
            "before_mb": round(before.plan.peak() / MB, 1),
            "planned_mb": round(plan.peak() / MB, 1),
            "planned_worker_mb": round(worker / MB, 1),
            "parts": {
                p.name: round(p.bytes / MB, 1) for p in plan.parts if p.phase is not Phase.UNUSED
            },
        }
    )


def run(args) -> int:
    """Every case asked for (or, with `replan`, the recorded ones planned again); the table
    printed, JSON written."""
    out = Path(args.out)
    if args.replan:
        recorded = json.loads(out.read_text())
        for case in recorded["cases"]:
            case["config"] = recorded["config"]
        args.config, args.rounds, args.sets = (
            recorded["config"],
            recorded["rounds"],
            recorded["sets"],
        )
        outcomes = [replanned(case) for case in recorded["cases"]]
    else:
        outcomes = []
        for name in args.case or list(CASES):
            sets = [*args.sets, *CASES[name]]
            outcomes.append(measure(name, args.config, sets, args.rounds, not args.stops))
            print(
                f"{name}: planned {outcomes[-1].planned_mb:.0f} MB, measured "
                f"{outcomes[-1].measured_mb:.0f} MB",
                flush=True,
            )
    print("\n".join(table(outcomes)))
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "config": args.config,
        "rounds": args.rounds,
        "sets": args.sets,
        "cases": [
            asdict(o) | {"measured_mb": o.measured_mb, "error": round(o.error, 4)} for o in outcomes
        ],
    }
    out.write_text(json.dumps(record, indent=2))
    print(f"wrote {out}")
    worst = max(abs(o.error) for o in outcomes)
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(child_main(json.loads(sys.argv[1])))
