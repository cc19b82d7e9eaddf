"""Scorers that would run a completion's answer as Python code run none of it (swarm.tasks.guard)."""

from __future__ import annotations

import pytest

from swarm.tasks import TaskSpec, build_task, score_completion
from swarm.tasks.guard import check_math_expression, literal_value


def payload(marker) -> str:
    """Python that, if evaluated, creates the file `marker`."""
    return f"__import__('pathlib').Path({str(marker)!r}).write_text('ran')"


@pytest.mark.parametrize("name", ["binary_matrix", "spiral_matrix", "n_queens", "string_insertion"])
def test_eval_scorers_never_run_an_answer(name, tmp_path):
    marker = tmp_path / "ran"
    task = build_task(TaskSpec.make(name, {}, seed=1, index=2))
    assert score_completion(task, f"<answer>{payload(marker)}</answer>") == 0.0
    assert score_completion(task, f"<answer>[{payload(marker)}]</answer>") == 0.0
    assert not marker.exists()
    assert score_completion(task, f"<answer>{task.answer}</answer>") == pytest.approx(1.0)


def test_a_list_answer_still_reads_as_a_list():
    task = build_task(TaskSpec.make("binary_matrix", {}, seed=1, index=2))
    rows = [[int(x) for x in line.split()] for line in task.answer.splitlines()]
    assert score_completion(task, f"<answer>{rows}</answer>") == pytest.approx(
        0.1
    )  # its partial credit


@pytest.mark.parametrize(
    "name", ["countdown", "puzzle24", "polynomial_multiplication", "simple_integration"]
)
def test_sympy_scorers_never_run_an_answer(name, tmp_path):
    marker = tmp_path / "ran"
    task = build_task(TaskSpec.make(name, {}, seed=1, index=2))
    for text in (payload(marker), "x.__class__", "Symbol('x')", "exec"):
        assert (
            score_completion(task, f"<answer>{text}</answer>") <= 0.01
        )  # some give 0.01 to any answer
    assert not marker.exists()
    if task.answer is not None:
        assert score_completion(task, f"<answer>{task.answer}</answer>") == pytest.approx(1.0)


def test_plain_math_passes_and_code_does_not():
    for ok in ("3*x**2 + 2*x - 1", "-cos(x) + C", "(1 + 2) * 7 / 3", "sqrt(2)*exp(x)", "1.5e3"):
        check_math_expression(ok)
    for bad in (
        "__import__('os')",
        "x.func",
        "(x).args",
        "[1]",
        "lambda: 0",
        "open",
        "a;b",
        "1" * 3000,
    ):
        with pytest.raises(ValueError):
            check_math_expression(bad)


def test_literal_value_reads_literals_only():
    assert literal_value(" [[0, 1], ['a', 2.5]] ") == [[0, 1], ["a", 2.5]]
    for bad in ("9**9", "f(1)", "[x]", "1" * 70_000):
        with pytest.raises(ValueError):
            literal_value(bad)
