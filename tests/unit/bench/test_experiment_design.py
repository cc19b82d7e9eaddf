"""The SAPO experiment's design: arms, protocol settings, node configs and the verdict rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.experiment import (
    ARMS,
    STUDIES,
    Arm,
    Protocol,
    RunShape,
    best_channel,
    compare,
    node_config,
    paired_ci,
    parse_arm,
)
from lab.tuning import best_lr
from swarm.config import build_config
from swarm.core.errors import ConfigError
from swarm.node import trainer_settings
from swarm.policy.trainer import OptimizerKind


def test_a_node_generates_one_question_per_own_group():
    assert {name: arm.questions for name, arm in ARMS.items()} == {
        "8/0": 8,
        "4/0": 4,
        "4/4": 4,
        "6/2": 6,
        "2/6": 2,
        "4/4-need": 4,
    }
    table = node_config(
        ARMS["4/4"],
        Protocol.PAPER,
        {"preset": "easy"},
        "swarm-tiny",
        index=2,
        seed=1,
        lr=1e-4,
        run_dir="r",
        shape=RunShape(),
    )
    cfg = build_config(table, "test")
    assert cfg.generation.questions_per_round == cfg.training.own_groups == 4
    assert cfg.sharing.shared_groups == 4 and cfg.node.seed == 1002


@pytest.mark.parametrize("protocol", list(Protocol))
def test_protocol_settings_reach_the_config_and_the_trainer(protocol, tiny_model_path):
    cfg = build_config(
        node_config(
            ARMS["4/4-need"],
            protocol,
            {"preset": "easy"},
            "swarm-tiny",
            index=0,
            seed=0,
            lr=3e-4,
            run_dir="r",
            shape=RunShape(),
        ),
        "test",
    )
    t, s = cfg.training, cfg.sharing
    assert s.shared_sampling == "need" and t.lr == 3e-4
    # the same reward in both protocols: the tagged answer's correctness, 1 or 0, no bonus
    assert (cfg.tasks.format_reward, cfg.tasks.answer_rule, cfg.tasks.partial_credit) == (
        0.0,
        "tagged",
        False,
    )
    paper = protocol == Protocol.PAPER
    assert (t.signal_filter, s.fresh_rounds, t.optimizer) == (
        ("shared", 1, "adam") if paper else ("all", 0, "adamw")
    )

    class FakePolicy:  # trainer_settings reads the device, the dtype and the model's size
        import torch

        device, dtype = torch.device("cpu"), torch.float32
        model = torch.nn.Linear(4, 4)

    settings = trainer_settings(cfg, FakePolicy())
    assert settings.optimizer == (OptimizerKind.ADAM if paper else OptimizerKind.ADAMW)
    assert settings.max_grad_norm == (0.0 if paper else 1.0) and settings.minibatch_size == 0


@pytest.mark.parametrize(
    "text, arm", [("4/4", Arm(4, 4)), ("4/4-need", Arm(4, 4, "need")), (" 8/0 ", Arm(8, 0))]
)
def test_parse_arm(text, arm):
    assert parse_arm(text) == arm and parse_arm(arm.name) == arm


@pytest.mark.parametrize("text", ["4", "a/b", "0/4", "4/0-need", "4/4-best"])
def test_bad_arms_are_one_line_errors(text):
    with pytest.raises(ConfigError):
        parse_arm(text)


def _cumulative(cand, base):
    return {"A": dict(enumerate(cand)), "B": dict(enumerate(base))}


def test_the_rule_passes_a_clear_win_and_names_each_failure():
    held = {"A": {s: {"x": 0.5} for s in range(6)}, "B": {s: {"x": 0.4} for s in range(6)}}
    win = compare("A", "B", _cumulative([13, 12.5, 12, 13.5, 12, 12.8], [10] * 6), held)
    assert win.passed and win.wins == 6 and win.ci_low > 1.15 - 0.1 and not win.why
    mixed = compare("A", "B", _cumulative([13, 12, 9, 9.5, 12, 12], [10] * 6), held)
    assert not mixed.passed and any("wins 4 of 6" in w for w in mixed.why)
    worse_held = {"A": {s: {"x": 0.3} for s in range(6)}, "B": held["B"]}
    lost = compare("A", "B", _cumulative([13] * 5 + [13.1], [10] * 6), worse_held)
    assert not lost.passed and lost.why == ("held-out lower on x -0.100",)


@given(st.lists(st.floats(0.5, 2.0), min_size=2, max_size=9))
def test_paired_ci_contains_the_mean(values):
    mean, low, high = paired_ci(values)
    assert low <= mean + 1e-12 and mean - 1e-12 <= high


def test_best_lr_prefers_the_smaller_rate_on_ties():
    assert best_lr({3e-4: 5.0, 1e-4: 5.0, 3e-5: 1.0}) == 1e-4
    with pytest.raises(ConfigError):
        best_lr({})


# -- the channels study ----------------------------------------------------------------------


def test_channel_arms_parse_name_and_reach_the_config():
    arm = parse_arm("4/4-joint+shape")
    assert arm.name == "4/4-joint+shape" and arm.channels == ("joint", "shape")
    assert arm.generated_questions == 8 and arm.questions == 4  # 8/0 is its equal-cost rival
    assert parse_arm("4/4-recv").generated_questions == 4
    assert parse_arm("4/4-need").name == "4/4-need"
    cfg = build_config(
        node_config(
            arm,
            Protocol.PAPER,
            {"preset": "easy"},
            "swarm-tiny",
            index=0,
            seed=0,
            lr=1e-3,
            run_dir="r",
            shape=RunShape(),
        ),
        "test",
    )
    s = cfg.sharing
    assert (s.shared_advantage, s.shared_shaping, s.shared_normalizer) == ("joint", 0.1, "batch")
    parts = parse_arm("4/4-parts+shuf")
    assert parts.sharing() == {"shared_normalizer": "parts", "shared_weight": 0.5}
    assert parts.shuffles_rewards and not parse_arm("4/4-parts").shuffles_rewards


@pytest.mark.parametrize("bad", ["4/0-joint", "4/4-joint+recv", "4/4-magic", "4-4"])
def test_bad_channel_arms_are_one_line_errors(bad):
    with pytest.raises(ConfigError):
        parse_arm(bad)


def test_the_channels_study_judges_every_4_4_arm_against_8_0_and_4_0():
    study = STUDIES["channels"]
    assert study.learning_rates == (1e-4, 3e-4, 1e-3) and study.rounds == 300
    for arm in study.arms:
        parse_arm(arm)
    candidates = [a for a in study.arms if a.startswith("4/4")]
    assert set(study.comparisons) == {(c, b) for c in candidates for b in ("8/0", "4/0")}
    assert study.folder("paper", "gap") == "channels-paper-gap"
    assert STUDIES["sharing"].folder("paper", "skills") == "paper-skills"


def test_the_best_channel_is_the_highest_mean_pass_or_fail_and_needs_every_seed():
    cumulative = {
        "4/4": {0: 99.0, 1: 99.0},  # plain 4/4 is not a channel
        "4/4-joint": {0: 10.0, 1: 14.0},  # mean 12
        "4/4-recv": {0: 13.0, 1: 12.0},  # mean 12.5: best though it wins one seed of two
        "4/4-shape": {0: 1.0, 1: 1.0},
        "4/4-parts": {0: 12.5, 1: 12.5},  # ties with recv: the first listed wins
    }
    assert best_channel(cumulative, seeds=(0, 1)) == "4/4-recv"
    assert best_channel(cumulative, arms=("4/4-parts", "4/4-recv"), seeds=(0, 1)) == "4/4-parts"
    del cumulative["4/4-shape"][1]
    with pytest.raises(ConfigError, match="4/4-shape seed 1"):
        best_channel(cumulative, seeds=(0, 1))


def test_the_negative_control_is_judged_against_4_0_and_plain_4_4():
    study = STUDIES["channels"]
    assert study.controls == (("4/4-shuf", "4/0"), ("4/4-shuf", "4/4"))
    control = parse_arm("4/4-shuf")
    assert control.shuffles_rewards and control.sharing() == {}
