"""scripts/bench_memory_plan.py's parts that need no join process: the plan at the sizes a
run reached, the sizes recorded from a trainer's passes, the table, reading a peak RSS."""

from __future__ import annotations

import os
import random

import pytest

from lab.memory_plan import Outcome, Sizes, at_sizes, plan_of, table, vm_hwm_kb
from swarm.policy.memory import MB


def test_the_plan_at_the_sizes_reached_is_smaller_than_the_worst_case():
    before = plan_of(None, ["generation.max_new_tokens=64"])
    reached = {
        "prompt_tokens": before.work.prompt_tokens,
        "new_tokens": 20,
        "generate_rows": before.work.generate_rows,
        "update_rows": 96,
        "micro_batch": 16,
    }
    assert at_sizes(before, reached).peak() < before.plan.peak()
    same = dict(reached, new_tokens=64, update_rows=before.work.update_rows)
    assert at_sizes(before, same).peak() == before.plan.peak()


def test_the_sizes_of_a_trainers_passes_are_recorded(tiny_policy):
    import copy

    from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample

    sizes = Sizes()
    put_back = sizes.install(full_length=True)
    rng = random.Random(0)
    samples = [
        TrainSample(tuple(range(6, 6 + 30)), tuple(rng.randrange(6, 90) for _ in range(n)), a)
        for n, a in ((5, 1.0), (12, -1.0), (7, 0.0), (9, 0.5))
    ]
    model = copy.deepcopy(tiny_policy.model)
    try:
        GRPOTrainer(model, 0, TrainerSettings(micro_batch_size=2)).update(samples)
    finally:
        put_back()
    assert GRPOTrainer.update.__name__ == "update"
    assert sizes.reached["update_rows"] == 3  # the sample without an advantage is left out
    assert sizes.reached["micro_batch"] == 2
    assert sizes.reached["new_tokens"] == 12 and sizes.reached["prompt_tokens"] == 30


def test_the_table_has_a_row_per_case():
    reached = dict.fromkeys(("generate_rows", "update_rows", "micro_batch"), 64)
    reached |= {"prompt_tokens": 68, "new_tokens": 64}
    outcome = Outcome("large", (), 64, 900.0, 1100.0, 110.0, 900.0, 100.0, 30.0, reached, {})
    assert outcome.measured_mb == 1000.0 and outcome.error == pytest.approx(0.1)
    lines = table([outcome])
    assert lines[0].split()[:2] == ["case", "micro"]
    assert lines[1].split() == [
        "large",
        "64",
        "64",
        "68+64",
        "900",
        "1100",
        "900",
        "100",
        "1000",
        "+10.0%",
    ]


def test_a_peak_rss_is_read_for_a_live_process_only():
    assert vm_hwm_kb(os.getpid()) * 1024 > 10 * MB
    assert vm_hwm_kb(2**22 + 7) == 0  # no such process
