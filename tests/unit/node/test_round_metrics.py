"""What a round's rows say about its groups, computed from plain data (`round_metrics`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from swarm.node.ledger_rows import round_metrics
from swarm.tasks import EASY_MIX, Scoring, TaskSpec, build_task


def _task():
    return build_task(TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=3, index=0))


def _group(task, texts, rewards, tokens=2):
    completions = [SimpleNamespace(text=t, token_ids=[0] * tokens) for t in texts]
    return SimpleNamespace(task=task, completions=completions, rewards=list(rewards))


def test_round_metrics_from_hand_made_groups():
    task = _task()
    right, wrong = f"<answer>{task.answer}</answer>", "no tag, wrong"
    a = _group(task, [right, wrong], [1.0, 0.0], tokens=3)
    b = _group(task, [right, right], [1.0, 0.5], tokens=5)
    shared = [SimpleNamespace(rewards=[0.0, 0.0, 0.0, 0.0])]
    m = round_metrics([a, b], trained=[a], shared=shared, scoring=Scoring())
    assert (m.questions, m.completions, m.tokens) == (2, 4, 3 * 2 + 5 * 2)
    assert m.mean_reward == pytest.approx(2.5 / 4)
    assert m.accuracy == pytest.approx(3 / 4)
    assert m.tagged == pytest.approx(3 / 4)
    assert (m.trained_groups, m.shared_groups, m.samples) == (1, 1, 2 + 4)
    assert m.batch_reward == pytest.approx(1.0 / 6)


def test_round_metrics_of_an_empty_round_are_zero():
    m = round_metrics([], trained=[], shared=[], scoring=Scoring())
    assert (m.questions, m.completions, m.samples) == (0, 0, 0)
    assert m.mean_reward == m.accuracy == m.tagged == m.batch_reward == 0.0
