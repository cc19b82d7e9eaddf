"""What does each model of the skill swarm know at the start? A calibration table.

For each built-in skill (or gap) model of `swarm.policy.skills` and each task family, samples
`completions` answers at `temperature` to `questions` held-out questions, and measures:

- signal: the share of groups whose rewards are not all equal (GRPO can learn from them),
  with rewards 1 for a right tagged answer and 0 otherwise (the paper's stated reward);
  also with reasoning-gym's partial credit kept, and under the lenient rule (an untagged
  answer counts too);
- acc: per-completion accuracy, tagged and lenient;
- tag: the share of completions that contain a tagged answer.

`run` takes the options of `scripts/sapo_calibrate.py`, prints the table and writes JSON.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class Cell:
    """One model on one family. Rewards are correctness only (no format bonus)."""

    node: str
    family: str
    warmed: bool
    groups: int
    signal: float  # groups with signal: tagged rule, exact reward (1 if right, else 0)
    signal_partial: float  # ... tagged rule, reasoning-gym's partial credit kept
    signal_lenient: float  # ... lenient rule (untagged answers count), exact reward
    acc: float  # per-completion accuracy, tagged rule
    acc_lenient: float  # per-completion accuracy, lenient rule
    tag_rate: float  # completions with a tagged answer


def summarize(node: str, family: str, warmed: bool, rewards: dict[str, list], tagged: list) -> Cell:
    """A `Cell` from per-group reward lists (keys: exact, partial, lenient) and tag flags."""
    from swarm.policy.grpo import has_signal

    completions = sum(len(g) for g in tagged)

    def signal(key):
        return sum(has_signal(g) for g in rewards[key]) / len(rewards[key])

    def accuracy(key):
        return sum(r >= 1.0 for g in rewards[key] for r in g) / completions

    return Cell(
        node=node,
        family=family,
        warmed=warmed,
        groups=len(tagged),
        signal=signal("exact"),
        signal_partial=signal("partial"),
        signal_lenient=signal("lenient"),
        acc=accuracy("exact"),
        acc_lenient=accuracy("lenient"),
        tag_rate=sum(t for g in tagged for t in g) / completions,
    )


def measure(name: str, path: str, families: dict, known: tuple[str, ...], args) -> list[Cell]:
    """Sample every family's held-out questions with the model at `path`; one `Cell` per family."""
    import torch

    from swarm.policy.generator import SamplingParams, TransformersGenerator
    from swarm.policy.model import load_policy
    from swarm.policy.prompts import build_prompt
    from swarm.tasks import AnswerRule, build_task, extract_answer, sample_specs, score_completion

    policy = load_policy(path, device="cpu", dtype="float32")
    tok = policy.tokenizer
    generator = TransformersGenerator(policy.model, tok, policy.stop_token_ids, batch_size=256)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    variants: dict[str, dict[str, Any]] = {
        "exact": dict(rule=AnswerRule.TAGGED, partial_credit=False),
        "partial": dict(rule=AnswerRule.TAGGED, partial_credit=True),
        "lenient": dict(rule=AnswerRule.LENIENT, partial_credit=False),
    }
    cells = []
    for f_index, (family, entry) in enumerate(families.items()):
        tasks = [build_task(s) for s in sample_specs((entry,), args.seed, 0, args.questions)]
        prompts = [build_prompt(tok, t.question) for t in tasks]
        torch.manual_seed(args.seed * 100 + f_index)
        groups = generator.generate(prompts, args.completions, params)
        rewards: dict[str, list] = {key: [] for key in variants}
        tagged = []
        for task, group in zip(tasks, groups, strict=True):
            for key, how in variants.items():
                rewards[key].append([score_completion(task, c.text, 0.0, **how) for c in group])
            tagged.append([extract_answer(c.text)[1] for c in group])
        cells.append(summarize(name, family, family in known, rewards, tagged))
    return cells


def print_table(console: Console, cells: list[Cell], families: list[str]) -> None:
    title = (
        "At the start, per family: groups with signal (exact reward, tagged rule) | "
        "the same with partial credit | lenient rule; accuracy (tagged | lenient); tag rate. "
        "* = warmed on"
    )
    table = Table(title=title, show_lines=True)
    table.add_column("node")
    for family in families:
        table.add_column(family, justify="right")
    for node in dict.fromkeys(c.node for c in cells):
        row = [node]
        for family in families:
            c = next(x for x in cells if x.node == node and x.family == family)
            row.append(
                f"{'*' if c.warmed else ''}sig {c.signal:.0%} | {c.signal_partial:.0%} | "
                f"{c.signal_lenient:.0%}\nacc {c.acc:.0%} | {c.acc_lenient:.0%}\n"
                f"tag {c.tag_rate:.0%}"
            )
        table.add_row(*row)
    console.print(table)


def run(args) -> None:
    """Build or load each model, measure it on every family, print the table, write the JSON."""
    import torch

    torch.set_num_threads(args.threads)
    from swarm.policy.skills import FAMILIES, GAP_SWARM, SKILL_SWARM
    from swarm.policy.tiny import ensure_tiny_model

    console = Console()
    swarm = GAP_SWARM if args.testbed == "gap" else SKILL_SWARM
    nodes = args.nodes or [p.name for p in swarm]
    profiles = {p.name: p for p in SKILL_SWARM + GAP_SWARM}
    cells, timings = [], {}
    for name in nodes:
        t0 = time.perf_counter()
        path = ensure_tiny_model(name)
        t1 = time.perf_counter()
        profile = profiles.get(name)
        known = tuple(f for f in profile.families if f not in profile.weak) if profile else ()
        node_cells = measure(name, str(path), FAMILIES, known, args)
        timings[name] = {
            "build_or_load_s": round(t1 - t0, 1),
            "measure_s": round(time.perf_counter() - t1, 1),
        }
        console.print(
            f"{name}: ready in {t1 - t0:.0f} s, measured in {time.perf_counter() - t1:.0f} s"
        )
        cells.extend(node_cells)
    print_table(console, cells, list(FAMILIES))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"args": vars(args), "timings": timings, "cells": [asdict(c) for c in cells]}
    out.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {out}")
