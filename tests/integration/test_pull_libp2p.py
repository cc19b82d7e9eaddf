"""Network-only nodes speaking the pull exchange as processes over libp2p on 127.0.0.1: each
joins through one bootstrap address with peer exchange off, comes to know the others through
its view alone, and every group it pulls is delivered and verified."""

from __future__ import annotations

import pytest

from tests.integration.test_network_only_processes import rounds_of, start_together

NODES = 5


def test_pull_nodes_find_each_other_from_one_address_and_verify_every_pull(tmp_path):
    common = [
        "--exchange",
        "pull",
        "--no-peer-exchange",
        "--rounds",
        "5",
        "--period",
        "3",
        "--groups",
        "6",
        "--shared",
        "4",
    ]
    results = [rounds_of(p) for p in start_together(common, NODES, tmp_path / "start")]
    for rounds in results:
        assert len(rounds) == 5
        last = rounds[-1]
        # it knows (nearly) every other node, though it was told of one (the first: none)
        assert last["extra"]["view_size"] >= NODES - 2
        pulls = sum(r["extra"]["pulls"] for r in rounds)
        # two rounds of 4 senders x 2 each (per-sender cap) at least; over libp2p a round
        # pulls from the lists asked at the end of the round before (the first: none yet)
        assert pulls >= 2 * 8
        assert sum(r["extra"]["pulls_failed"] for r in rounds) == 0
        assert sum(r["accepted"] for r in rounds) == sum(r["verified"] for r in rounds) == pulls
        assert all(r["rejected"] == 0 for r in rounds)
        assert max(r["peak_mb"] for r in rounds) < 100


@pytest.mark.slow  # ~65 s on 2 cores; the demo test covers a pull swarm of trainers by default
def test_a_trainer_process_trains_on_groups_pulled_over_libp2p(tmp_path, tiny_model_path):
    from lab.scale_real import RealSettings, run_real

    settings = RealSettings(
        network=3,
        trainers=1,
        rounds=8,
        period_s=6.0,
        groups=6,
        shared=4,
        trainer_rounds=3,
        trainer_questions=4,
        trainer_shared=2,
        nice=0,
    )
    result = run_real(settings, tmp_path)
    summary = result["summary"]
    assert summary["network_failed_processes"] == summary["trainer_failed_processes"] == 0
    assert summary["network_pulls"] > 0 and summary["network_pulls_failed"] == 0
    assert summary["network_verified"] == summary["network_accepted"] == summary["network_pulls"]
    (trainer,) = result["trainers"]
    # it pulled, verified and trained on peers' groups, and refused none
    assert trainer["accepted"] > 0 and trainer["group_uses"] > 0 and trainer["rejected"] == {}
