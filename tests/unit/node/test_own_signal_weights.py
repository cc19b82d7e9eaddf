"""Study 4's protection of a node's own learning, pure parts: own and shared tokens normalised
apart with per-family shared weights (`weighted(..., relative)`), and the own-signal control
that sets them from the node's own recent groups (`learning_families`, `own_signal_weights`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swarm.batch_choice import learning_families, own_signal_weights
from swarm.config import SharingSection
from swarm.node.shared_samples import weighted
from swarm.policy.trainer import TrainSample

FAMILIES = ("chain_sum", "complex_arithmetic", "fraction_simplification", "spell_backward")
rewards01 = st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=8)
own_groups = st.lists(st.tuples(st.sampled_from(FAMILIES), rewards01), max_size=20)


def test_a_family_is_learned_by_the_node_where_one_of_its_own_groups_has_signal():
    groups = [
        ("complex_arithmetic", (0.0, 0.0, 0.0, 0.0)),  # all wrong: nothing to learn alone
        ("complex_arithmetic", (0.0, 1.0, 0.0, 0.0)),  # one rare hit: it is learning it
        ("chain_sum", (0.0,) * 8),
        ("spell_backward", (1.0,) * 8),  # mastered: no signal either
    ]
    assert learning_families(groups) == {"complex_arithmetic"}
    weights = own_signal_weights(
        ["complex_arithmetic", "chain_sum", "spell_backward"],
        learning_families(groups),
        0.5,
        0.1,
    )
    assert weights == [0.1, 0.5, 0.5]
    assert learning_families([]) == frozenset()


@given(own_groups)
def test_learning_families_are_exactly_those_with_a_mixed_own_group(groups):
    learned = learning_families(groups)
    for family in FAMILIES:
        mixed = any(f == family and len(set(r)) > 1 for f, r in groups)
        assert (family in learned) == mixed
    assert learning_families(list(reversed(groups))) == learned  # order does not matter


@given(own_groups, st.lists(st.sampled_from(FAMILIES), max_size=12))
def test_own_signal_weights_protect_exactly_the_families_the_node_is_learning(groups, families):
    learned = learning_families(groups)
    weights = own_signal_weights(families, learned, 0.5, 0.1)
    assert len(weights) == len(families)
    assert all(w == (0.1 if f in learned else 0.5) for f, w in zip(families, weights))


def _samples(lengths, advantages):
    return [TrainSample((1,), tuple(range(2, 2 + n)), a) for n, a in zip(lengths, advantages)]


lengths = st.lists(st.integers(1, 12), min_size=1, max_size=6)
signs = st.sampled_from([-1.0, 0.5, 1.0])


@given(lengths, lengths, st.data())
def test_own_tokens_keep_their_weight_whatever_the_shared_part_holds(own_len, shared_len, data):
    """With N the batch's trained tokens, the own part's total weight is N (its loss is
    sum(own)/N_own, as if it trained alone) and the shared part's is N times the token-weighted
    mean of the relative weights: the shared part never dilutes the own one."""
    own = _samples(
        own_len, data.draw(st.lists(signs, min_size=len(own_len), max_size=len(own_len)))
    )
    shared = _samples(shared_len, [1.0] * len(shared_len))
    relative = data.draw(
        st.lists(st.sampled_from([0.0, 0.1, 0.5, 1.0]), min_size=len(shared), max_size=len(shared))
    )
    settings = SharingSection(shared_normalizer="parts", shared_weight=0.5)
    out = weighted(own, shared, settings, relative)
    n_own = sum(len(s.completion_ids) for s in own)
    n_shared = sum(len(s.completion_ids) for s in shared)
    total = n_own + n_shared
    own_out, shared_out = out[: len(own)], out[len(own) :]
    assert sum(s.weight * len(s.completion_ids) for s in own_out) == pytest.approx(total)
    mean_relative = sum(r * len(s.completion_ids) for s, r in zip(shared, relative)) / n_shared
    shared_total = sum(s.weight * len(s.completion_ids) for s in shared_out)
    assert shared_total == pytest.approx(total * mean_relative)
    # the own part's weights do not depend on what the shared part weighs
    plain = weighted(own, shared, settings, [1.0] * len(shared))
    assert [s.weight for s in own_out] == pytest.approx([s.weight for s in plain[: len(own)]])


@given(lengths, lengths, st.sampled_from([0.1, 0.25, 0.5, 1.0]))
def test_one_relative_weight_for_all_is_the_fixed_shared_weight(own_len, shared_len, weight):
    own, shared = (
        _samples(own_len, [1.0] * len(own_len)),
        _samples(shared_len, [-1.0] * len(shared_len)),
    )
    settings = SharingSection(shared_normalizer="parts", shared_weight=weight)
    fixed = weighted(own, shared, settings)
    controlled = weighted(own, shared, settings, [weight] * len(shared))
    assert [s.weight for s in controlled] == pytest.approx([s.weight for s in fixed])


def test_relative_weights_by_hand():
    own = _samples([2], [1.0])  # 2 own tokens
    shared = _samples([4, 4], [1.0, -1.0])  # 8 shared tokens: one learning family, one not
    out = weighted(own, shared, SharingSection(shared_normalizer="parts"), [0.1, 0.5])
    assert [s.weight for s in out] == pytest.approx([10 / 2, 0.1 * 10 / 8, 0.5 * 10 / 8])
    with pytest.raises(ValueError):  # one weight per shared sample
        weighted(own, shared, SharingSection(shared_normalizer="parts"), [0.1])


def test_the_control_is_config_keys_with_help_and_one_line_errors():
    from swarm.config import build_config, describe_config
    from swarm.core.errors import ConfigError

    built = build_config(
        {"sharing": {"shared_normalizer": "parts", "shared_weight_control": "own-signal"}}
    )
    assert (built.sharing.shared_weight_control, built.sharing.own_signal_weight) == (
        "own-signal",
        0.1,
    )
    assert build_config({}).sharing.shared_weight_control == "fixed"
    with pytest.raises(ConfigError, match='needs sharing.shared_normalizer = "parts"') as err:
        build_config({"sharing": {"shared_weight_control": "own-signal"}})
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="own_signal_weight") as err:
        build_config({"sharing": {"own_signal_weight": -0.5}})
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="shared_weight_control"):
        build_config({"sharing": {"shared_weight_control": "adaptive"}})
    helps = {key: text for key, _, text in describe_config()}
    assert "own-signal" in helps["sharing.shared_weight_control"]
    assert "learning by itself" in helps["sharing.own_signal_weight"]
