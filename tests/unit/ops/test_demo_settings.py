"""The demo's settings: the tiny model's or a real model's, a config file's keys winning over
them, the worked examples passed as one --set, and each node's costs read back."""

import json

from swarm.config.load import load_config
from swarm.ops.demo import (
    DEMO_DEFAULTS,
    EXAMPLES_TOML,
    REAL_DEMO_DEFAULTS,
    STOP_GRACE_S,
    demo_defaults,
    stop_grace,
    unset_by_file,
)
from swarm.ops.demo_costs import round_costs, vm_hwm_mb
from swarm.policy.prompts import ARITHMETIC_EXAMPLES


def test_the_tiny_model_keeps_the_tiny_settings_and_a_real_model_gets_its_own():
    assert demo_defaults("") == DEMO_DEFAULTS
    assert demo_defaults("swarm-tiny") == DEMO_DEFAULTS
    real = demo_defaults("smollm2-135m")
    assert real[0] == 'policy.model="smollm2-135m"'
    assert real[1:] == REAL_DEMO_DEFAULTS
    config = load_config(None, list(REAL_DEMO_DEFAULTS), env={})
    assert config.training.lr == 1e-5
    assert config.sharing.shared_from == "same-family"


def test_the_worked_examples_travel_as_one_set():
    config = load_config(None, ["policy.prompt_examples=" + EXAMPLES_TOML], env={})
    assert config.policy.prompt_format().examples == ARITHMETIC_EXAMPLES


def test_a_config_files_keys_win_over_the_demos(tmp_path):
    path = tmp_path / "node.toml"
    path.write_text("[training]\nlr = 2e-6\n[generation]\nmax_new_tokens = 12\n")
    kept = unset_by_file(REAL_DEMO_DEFAULTS, path)
    assert "training.lr=1e-5" not in kept and "generation.max_new_tokens=32" not in kept
    assert "generation.questions_per_round=4" in kept
    assert load_config(path, kept, env={}).training.lr == 2e-6
    assert unset_by_file(DEMO_DEFAULTS, None) == list(DEMO_DEFAULTS)


def test_round_costs_are_read_from_the_nodes_metrics(tmp_path):
    rounds = [
        {"kind": "round", "total_s": 10.0, "generate_s": 4.0, "train_s": 5.0, "verify_s": 0.5,
         "spot_checks": 1, "shared_groups": 2},
        {"kind": "eval", "accuracy": 0.5},
        {"kind": "round", "total_s": 30.0, "generate_s": 6.0, "train_s": 7.0, "verify_s": 1.5,
         "spot_checks": 0, "shared_groups": 4},
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rounds) + "\n")
    costs = round_costs(tmp_path)
    assert costs["rounds_timed"] == 2
    assert costs["round_s_median"] == 20.0
    assert costs["verify_share"] == 2.0 / 40.0
    assert costs["spot_checks"] == 1 and costs["shared_trained"] == 6
    assert round_costs(tmp_path / "absent") == {}


def test_peak_memory_of_a_live_process_and_of_none():
    import os

    assert vm_hwm_mb(os.getpid()) > 10
    assert vm_hwm_mb(2**22 + 12345) is None


def test_a_stopped_real_model_node_gets_a_rounds_time_to_end_cleanly():
    """Ctrl-C lets each node finish its round: a real model's took 100-160 s with 4 nodes on
    2 cores, and the 60 s it had killed three of four mid-way."""
    assert stop_grace("tiny", 4) == STOP_GRACE_S == 60.0
    assert stop_grace("real", 4) == 480.0 and stop_grace("real", 1) == 240.0
