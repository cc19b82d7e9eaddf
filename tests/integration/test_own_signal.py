"""Study 4's gate in a small swarm: the own-signal control weighs peers' groups by what each
node's own groups show, and a unit records which families a node was learning by itself."""

from __future__ import annotations

import json


def test_a_gate_unit_trains_on_shared_groups_and_logs_the_learning_families(
    tmp_path, tiny_model_path, sapo_experiment
):
    args = ["quick", "--nodes", "3", "--arms", "2/2-gate", "--completions", "4"]
    args += ["--study", "sharing", "--testbed", "tiny", "--results", str(tmp_path)]
    assert sapo_experiment.main(args) == 0
    path = tmp_path / "paper-tiny" / "units" / "2-2-gate_s0_lr0.0001.json"
    unit = json.loads(path.read_text())
    assert sum(unit["shared_groups"]) > 0
    assert len(unit["learning_rounds"]) == 3
    # the tiny model gets some one-digit sums right (the tiny testbed's one family): its own
    # groups carry signal there, so its peers' groups weighed own_signal_weight
    learned = {family for node in unit["learning_rounds"] for family in node}
    assert learned == {"chain_sum"}
    assert all(n <= unit["rounds"] for node in unit["learning_rounds"] for n in node.values())
