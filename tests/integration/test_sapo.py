"""SAPO in a small swarm: nodes train on each other's groups, re-scored and re-tokenized locally."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import GroupRow, GroupUseRow, Ledger, UpdateRow
from swarm.node import Node
from swarm.p2p import MemoryHub, MemoryTransport
from tests.conftest import small_config


def _swarm(tmp_path, n=3, **sharing):
    hub = MemoryHub()
    nodes = []
    for i in range(n):
        key = create_identity(bytes([i + 1]) * 32)
        config = small_config(
            tmp_path / f"n{i}",
            node={"name": f"n{i}", "seed": i},
            generation={"questions_per_round": 4, "completions_per_question": 6},
            training={"own_groups": 4},
            sharing={"shared_groups": 4, "per_peer_cap": 1, **sharing},
            tasks={"eval_size": 0},
        )
        nodes.append(Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key))
    for node in nodes:
        node.start()
    return nodes


def _ledger(node):
    return Ledger(node.config.ledger_url)


def test_shared_groups_are_used_within_cap_and_only_with_signal(tmp_path, tiny_model_path):
    nodes = _swarm(tmp_path)
    for _ in range(4):
        for node in nodes:
            node.run_round()
    for node in nodes:
        with _ledger(node).reader() as s:
            uses = s.query(GroupUseRow).all()
            updates = s.query(UpdateRow).order_by(UpdateRow.round).all()
            rows = {r.id: r for r in s.query(GroupRow).filter(GroupRow.status == "accepted")}
        assert uses, f"{node.config.node.name} never trained on a shared group"
        per_round = Counter(u.round for u in uses)
        for update in updates:
            assert update.shared_groups == per_round.get(update.round, 0) <= 4
            senders = Counter(u.sender for u in uses if u.round == update.round)
            assert all(count <= 1 for count in senders.values())  # per-peer cap
        for use in uses:
            advantages = json.loads(use.advantages)
            assert (
                use.advantage_abs_sum > 0 and abs(sum(advantages)) < 1e-4
            )  # stored to 6 decimals; zero-advantage groups never used
            assert rows[use.group_id].sender == use.sender != node.peer_id
        assert len({u.content_hash for u in uses}) == len(
            uses
        )  # each shared group learned from once
        assert sum(u.shared_groups for u in updates) == len(uses)
    for node in nodes:
        node.close()


def test_without_shared_slots_nothing_shared_is_used(tmp_path, tiny_model_path):
    nodes = _swarm(tmp_path, n=2, shared_groups=0)
    for _ in range(2):
        for node in nodes:
            node.run_round()
    for node in nodes:
        with _ledger(node).reader() as s:
            assert s.query(GroupUseRow).count() == 0
            assert s.query(GroupRow).filter(GroupRow.status == "accepted").count() > 0
        node.close()


def test_heterogeneous_models_use_each_others_groups(tmp_path, tiny_model_path):
    """A char-level 1M-parameter node and a BPE 0.4M-parameter node re-tokenize each other's work."""
    hub = MemoryHub()
    nodes = []
    for i, model in enumerate(("swarm-tiny", "swarm-tiny-bpe")):
        key = create_identity(bytes([i + 11]) * 32)
        config = small_config(
            tmp_path / model,
            node={"name": model, "seed": i},
            policy={"model": model},
            generation={"questions_per_round": 4, "completions_per_question": 6},
            training={"own_groups": 4},
            sharing={"shared_groups": 4, "per_peer_cap": 4},
            tasks={"eval_size": 0},
        )
        node = Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)
        node.start()
        nodes.append(node)
    char_node, bpe_node = nodes
    assert len(char_node.policy.tokenizer) != len(bpe_node.policy.tokenizer)
    for _ in range(3):
        for node in nodes:
            node.run_round()
    for node, other in ((char_node, bpe_node), (bpe_node, char_node)):
        with _ledger(node).reader() as s:
            uses = s.query(GroupUseRow).all()
            accepted = s.query(GroupRow).filter(GroupRow.status == "accepted").all()
        assert uses and {u.sender for u in uses} == {other.peer_id}
        assert {r.model for r in accepted} == {other.config.policy.model}
        assert not any(g.same_model for g in node.pool.candidates() for g in [g.group])
    # the same completion text becomes different token ids under the two tokenizers
    text = "<answer>12</answer>"
    ids = [tuple(n.policy.tokenizer(text, add_special_tokens=False)["input_ids"]) for n in nodes]
    assert ids[0] != ids[1]
    assert [n.policy.tokenizer.decode(list(i)) for n, i in zip(nodes, ids)] == [text, text]
    for node in nodes:
        node.close()


def test_experiment_runs_units_and_reports(tmp_path, tiny_model_path, sapo_experiment):
    """`scripts/sapo_experiment.py quick` then `report` on a small swarm: one unit per arm is
    written, a node generates I questions a round, only the sharing arm trains on peers'
    groups, and the report holds both reward columns."""
    common = ["--study", "sharing", "--testbed", "tiny", "--results", str(tmp_path)]
    args = ["quick", "--nodes", "3", "--arms", "4/0,2/2", "--completions", "4", *common]
    assert sapo_experiment.main(args) == 0
    assert sapo_experiment.main(["report", *common]) == 0
    units = {
        p.name: json.loads(p.read_text())
        for p in (tmp_path / "paper-tiny" / "units").glob("*.json")
    }
    solo, sharing = units["4-0_s0_lr0.0001.json"], units["2-2_s0_lr0.0001.json"]
    assert solo["rounds"] == sharing["rounds"] == 3 and solo["nodes"] == 3
    assert solo["shared_groups"] == [0, 0, 0] and sum(sharing["shared_groups"]) > 0
    assert all(n <= 2 * 3 for n in sharing["shared_groups"])  # J = 2 per update, 3 rounds
    assert (
        solo["local_groups"] == [4 * 3] * 3
    )  # the paper's protocol: every own group kept, I = 4 generated
    assert sharing["local_groups"] == [2 * 3] * 3
    assert all(len(curve) == 3 for curve in solo["own_reward"] + solo["batch_reward"])
    assert (
        solo["cumulative_own_reward"] == solo["cumulative_batch_reward"]
    )  # no sharing, no filter: same groups
    report = json.loads((tmp_path / "paper-tiny" / "report.json").read_text())
    assert set(report["per_seed"]) == {"4/0", "2/2"}
    assert (tmp_path / "paper-tiny" / "cumulative.png").stat().st_size > 0


def test_channels_train_on_shared_groups_with_non_zero_net_advantage(tmp_path, tiny_model_path):
    """Joint baseline with shaping and a weighted shared part: nodes train, and the advantages
    recorded for a shared group need not sum to zero (its baseline includes ours)."""
    nodes = _swarm(
        tmp_path,
        shared_advantage="joint",
        shared_shaping=0.1,
        shared_normalizer="parts",
        shared_weight=0.5,
    )
    for _ in range(2):  # nodes 1 and 2 already see node 0's groups in the first round
        for node in nodes:
            node.run_round()
    sums = []
    for node in nodes:
        with _ledger(node).reader() as s:
            uses = s.query(GroupUseRow).all()
            updates = s.query(UpdateRow).all()
        assert updates and any(u.tokens > 0 for u in updates)
        sums += [sum(json.loads(u.advantages)) for u in uses]
    assert sums, "no node trained on a shared group"
    assert any(abs(x) > 1e-3 for x in sums)


def test_a_stopped_unit_resumes_from_its_checkpoints(
    tmp_path, tiny_model_path, sapo_experiment, monkeypatch
):
    """`--checkpoint-every 1`: a unit stopped in its third round reruns only that round, and
    its JSON holds all three rounds, the first two as logged before the stop."""
    args = ["quick", "--nodes", "2", "--arms", "4/0", "--completions", "4"]
    args += ["--study", "sharing", "--testbed", "tiny", "--results", str(tmp_path)]
    args += ["--checkpoint-every", "1"]
    calls, run_round = [], Node.run_round

    def stopping_run_round(node):
        calls.append(node.state.round)
        if len(calls) == 5:  # the first node's third round
            raise KeyboardInterrupt
        return run_round(node)

    monkeypatch.setattr(Node, "run_round", stopping_run_round)
    with pytest.raises(KeyboardInterrupt):
        sapo_experiment.main(args)
    logged = (tmp_path / "paper-tiny" / "work" / "4-0_s0_lr0.0001" / "rounds.jsonl").read_text()
    before = [json.loads(line) for line in logged.splitlines()][1:]
    assert [item["round"] for item in before] == [0, 1]
    assert sapo_experiment.main(args) == 0
    assert calls == [0, 0, 1, 1, 2] + [2, 2]  # resumed at round 2 on both nodes
    unit = json.loads((tmp_path / "paper-tiny" / "units" / "4-0_s0_lr0.0001.json").read_text())
    assert unit["rounds"] == 3
    assert [curve[:2] for curve in unit["own_reward"]] == [
        [before[0]["nodes"][k]["own"], before[1]["nodes"][k]["own"]] for k in range(2)
    ]
    assert not (tmp_path / "paper-tiny" / "work" / "4-0_s0_lr0.0001").exists()


def test_a_sharing_unit_rerun_from_the_same_code_gives_the_same_file(
    tmp_path, tiny_model_path, sapo_experiment
):
    """Two runs of one joint-baseline unit (peers' groups pulled, verified, trained on) agree in
    everything but their wall-clock; the unit names its commit and has no exchange fault."""
    units = []
    for run in ("a", "b"):
        args = ["quick", "--nodes", "3", "--arms", "2/2-joint", "--completions", "4"]
        args += ["--study", "sharing", "--testbed", "tiny", "--results", str(tmp_path / run)]
        assert sapo_experiment.main(args) == 0
        path = tmp_path / run / "paper-tiny" / "units" / "2-2-joint_s0_lr0.0001.json"
        units.append(json.loads(path.read_text()))
    first, second = ({k: v for k, v in u.items() if k != "seconds"} for u in units)
    assert sum(first["shared_groups"]) > 0
    assert first == second
    assert first["commit"] and first["exchange_faults"] == [{}, {}, {}]


def test_tuning_or_a_verdict_refuses_code_that_differs_from_its_commit(
    tmp_path, sapo_experiment, monkeypatch
):
    monkeypatch.setattr(sapo_experiment, "code_commit", lambda: "0123abcd+dirty")
    with pytest.raises(SystemExit, match="differs from its commit"):
        sapo_experiment.main(["tune", "--study", "default", "--results", str(tmp_path)])
