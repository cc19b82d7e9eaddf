"""Task specs rebuild deterministically; verifiers score completions; mixes sample reproducibly."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarm.core.errors import TaskError
from swarm.tasks import (
    EASY_MIX,
    SAPO_DATASETS,
    SAPO_MIX,
    AnswerRule,
    MixEntry,
    TaskSpec,
    build_task,
    extract_answer,
    is_correct,
    sample_specs,
    score_completion,
    validate_mix,
    well_formatted,
)


def test_spec_rebuilds_the_same_question_and_answer():
    spec = TaskSpec.make(
        "chain_sum", {"max_terms": 2, "min_terms": 2, "max_digits": 1, "min_digits": 1}, 7, 12
    )
    again = TaskSpec.make(
        "chain_sum", {"min_digits": 1, "min_terms": 2, "max_digits": 1, "max_terms": 2}, 7, 12
    )
    assert spec == again  # config key order does not matter
    a, b = build_task(spec), build_task(again)
    assert a.question == b.question and a.answer == b.answer


@pytest.mark.parametrize("name", SAPO_DATASETS)
def test_every_sapo_dataset_builds_and_scores_its_own_answer(name):
    task = build_task(TaskSpec.make(name, {}, seed=3, index=5))
    assert task.question
    if task.answer is not None:
        assert score_completion(task, f"<answer>{task.answer}</answer>") == pytest.approx(1.0)
    assert score_completion(task, "<answer>definitely wrong @@</answer>") < 1.0


def test_verifier_extracts_the_last_tagged_answer_and_adds_format_bonus():
    task = build_task(TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), 1, 0))
    right, wrong = task.answer, str(int(task.answer) + 1)
    assert extract_answer(f"<answer>{wrong}</answer> no, <answer> {right} </answer>") == (
        right,
        True,
    )
    assert extract_answer(f" {right}\n") == (right, False)
    assert score_completion(task, f"<answer>{right}</answer>", format_weight=0.1) == pytest.approx(
        1.1
    )
    assert score_completion(task, right, format_weight=0.1) == pytest.approx(1.0)
    assert score_completion(task, f"<answer>{wrong}</answer>", format_weight=0.1) == pytest.approx(
        0.1
    )
    assert score_completion(task, "", format_weight=0.1) == 0.0


def test_format_bonus_needs_the_answer_to_end_the_completion():
    task = build_task(TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), 1, 0))
    right = task.answer
    assert well_formatted(f"<answer>{right}</answer>") and well_formatted(
        f"think <answer>{right}</answer> \n"
    )
    assert well_formatted(f"<answer>1</answer> no: <answer>{right}</answer>")  # restating is fine
    for trailing in (
        f"<answer>{right}</answer>1</answer>10",
        f"<answer>{right}</answer>-1",
        f"<answer>{right}</answer><answer>",
    ):
        assert not well_formatted(trailing)
        assert score_completion(task, trailing, format_weight=0.1) == pytest.approx(
            1.0
        )  # still correct, no bonus
    assert not well_formatted(f"<answer>{right}") and not well_formatted(right)


@pytest.mark.parametrize(
    "spec",
    [
        TaskSpec.make("no_such_dataset", {}, 0, 0),
        TaskSpec.make("chain_sum", {"bogus_option": 3}, 0, 0),
        TaskSpec.make("chain_sum", {"min_terms": "many"}, 0, 0),
        TaskSpec.make("chain_sum", {}, 0, -1),
        TaskSpec.make("chain_sum", {}, 0, 1 << 40),
    ],
)
def test_bad_specs_are_task_errors_not_crashes(spec):
    with pytest.raises(TaskError):
        build_task(spec)


def test_config_must_be_plain_json():
    with pytest.raises(TaskError):
        TaskSpec.make("chain_sum", {"x": object()}, 0, 0)


def test_sample_specs_is_deterministic_and_never_repeats_an_index():
    first = sample_specs(SAPO_MIX, seed=5, round_index=3, count=16)
    assert first == sample_specs(SAPO_MIX, seed=5, round_index=3, count=16)
    assert first != sample_specs(SAPO_MIX, seed=6, round_index=3, count=16)
    later = sample_specs(SAPO_MIX, seed=5, round_index=4, count=16)
    assert not {s.index for s in first} & {s.index for s in later}
    assert len({s.dataset for s in sample_specs(SAPO_MIX, 5, 0, 200)}) == 9


def test_validate_mix_rejects_bad_entries():
    with pytest.raises(TaskError):
        validate_mix([])
    with pytest.raises(TaskError):
        validate_mix([MixEntry("chain_sum", weight=0)])
    with pytest.raises(TaskError):
        validate_mix([MixEntry("not_a_dataset")])
    assert validate_mix(EASY_MIX) == EASY_MIX


def test_tagged_rule_scores_only_tagged_answers():
    task = build_task(TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), 1, 0))
    right, wrong = task.answer, str(int(task.answer) + 1)
    tagged = AnswerRule.TAGGED
    assert score_completion(task, right, rule=tagged) == 0.0  # right, but bare: no fallback
    assert score_completion(task, right, format_weight=0.1, rule=tagged) == 0.0  # and no bonus
    assert score_completion(task, f"<answer>{right}</answer>", rule=tagged) == 1.0
    assert score_completion(task, f"<answer> {right} </answer>", rule=tagged) == 1.0
    last_right = f"<answer>{wrong}</answer> <answer>{right}</answer>"
    assert score_completion(task, last_right, rule=tagged) == 1.0
    last_wrong = f"<answer>{right}</answer><answer>{wrong}</answer>"
    assert score_completion(task, last_wrong, rule=tagged) == 0.0
    assert score_completion(task, f"{right} <answer>", rule=tagged) == 0.0  # unclosed: no tag
    assert score_completion(task, f"<answer>{right}</answer>", 0.1, tagged) == pytest.approx(1.1)
    assert is_correct(task, right) and not is_correct(task, right, rule=tagged)
    # The lenient rule is the default and unchanged: a bare right answer counts.
    assert score_completion(task, right) == 1.0
    assert score_completion(task, right, rule=AnswerRule.LENIENT) == 1.0


def test_no_format_bonus_means_correctness_only():
    task = build_task(TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), 1, 0))
    for rule in AnswerRule:
        assert score_completion(task, f"<answer>{task.answer}</answer>", 0.0, rule) == 1.0
        assert score_completion(task, "<answer>x</answer>", 0.0, rule) == 0.0


def test_without_partial_credit_correctness_is_all_or_nothing():
    task = build_task(TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), 1, 0))
    right = task.answer
    padded = f"<answer>1{right}</answer>"  # contains the answer: reasoning-gym gives partial credit
    assert 0.0 < score_completion(task, padded) < 1.0
    assert score_completion(task, padded, partial_credit=False) == 0.0
    assert score_completion(task, f"<answer>{right}</answer>", partial_credit=False) == 1.0
    bonus_only = score_completion(task, padded, 0.1, AnswerRule.TAGGED, partial_credit=False)
    assert bonus_only == pytest.approx(0.1)


_REFERENCE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@given(
    st.lists(
        st.sampled_from(["<answer>", "</answer>", "7", " ", "x\n", "<answer", "answer>", "</"]),
        max_size=12,
    )
)
def test_tag_parsing_matches_the_regex_it_replaces(parts):
    from swarm.tasks import extract_answer, last_tagged_answer, well_formatted

    text = "".join(parts)
    found = list(_REFERENCE.finditer(text))
    span = last_tagged_answer(text)
    if not found:
        assert (
            span is None
            and extract_answer(text) == (text.strip(), False)
            and not well_formatted(text)
        )
    else:
        last = found[-1]
        assert span == (last.start(1), last.end(1), last.end())
        assert extract_answer(text) == (last.group(1).strip(), True)
        assert well_formatted(text) == (not text[last.end() :].strip())


def test_crafted_tags_cost_linear_time():
    """Thousands of unclosed tags: a backtracking regex took seconds on 230 KB; this scans once."""
    import time

    from swarm.tasks import extract_answer

    small, large = "<answer>" * 2_000, "<answer>" * 32_000  # 16 KB and 256 KB

    def fastest(text: str) -> float:  # the best of several tries: a busy machine only adds
        tries = []
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(5):
                extract_answer(text)
            tries.append(time.perf_counter() - start)
        return min(tries)

    timings = [fastest(small), fastest(large)]
    # 16x the input: a linear scan takes ~16x, a quadratic one ~256x; allow noise up to 64x
    assert timings[1] < 64 * max(timings[0], 1e-4)
