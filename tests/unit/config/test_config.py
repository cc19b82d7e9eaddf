"""Config loading: every shipped preset parses; every user mistake is one clear line."""

from pathlib import Path

import pytest

from swarm.config import Config, build_config, describe_config, task_mix
from swarm.config.load import load_config
from swarm.core.errors import ConfigError

PRESETS = sorted((Path(__file__).parents[3] / "node_config").glob("*.toml"))


def test_there_are_presets():
    names = {p.name for p in PRESETS}
    assert {"solo-cpu.toml", "volunteer-gpu.toml"} <= names


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_preset_loads(path):
    config = load_config(path, env={})
    assert isinstance(config, Config)
    assert task_mix(config)


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_preset_documents_every_key(path):
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", "[")) and "=" in stripped:
            documented = "#" in stripped or lines[i - 1].strip().startswith("#")
            key = stripped.split("=")[0].strip()
            assert documented, f"{path.name}: key {key!r} has no comment"


def test_defaults_without_a_file():
    config = load_config(None, env={})
    assert config.policy.model == "swarm-tiny"
    assert config.ledger_url.endswith("runs/node/ledger.sqlite")


def _write(tmp_path, text):
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[training]\nlrr = 1e-5\n", "unknown key training.lrr (did you mean 'lr'?)"),
        ("[trainig]\nlr = 1e-5\n", "unknown section [trainig] (did you mean 'training'?)"),
        ("[training]\nlr = 'fast'\n", "training.lr: expected a number, got 'fast'"),
        ("[training]\nlr = -1.0\n", "training.lr: -1.0 is below the minimum 0.0"),
        (
            "[generation]\ncompletions_per_question = 1\n",
            "generation.completions_per_question: 1 is below the minimum 2",
        ),
        (
            "[generation]\nbackend = 'tgi'\n",
            "generation.backend: 'tgi' is not one of auto, transformers, continuous, vllm",
        ),
        ("[node]\nrounds = 2.5\n", "node.rounds: expected an integer, got 2.5"),
        ("[node]\nrounds = true\n", "node.rounds: expected an integer, got True"),
        (
            "[training]\nscale_advantages = 1\n",
            "training.scale_advantages: expected true or false, got 1",
        ),
        ("[training\nlr = 1\n", "invalid TOML"),
        ("node = 3\n", "[node] must be a table"),
        ("[tasks]\npreset = 'custom'\n", "tasks.mix must list datasets"),
        (
            "[tasks]\npreset = 'custom'\nmix = [{weight = 1.0}]\n",
            "tasks.mix[0] must be a table with a 'dataset' key",
        ),
        (
            "[tasks]\npreset = 'custom'\nmix = [{dataset = 'chain_sum', weight = -2}]\n",
            "tasks.mix[0].weight must be a positive number",
        ),
        (
            "[p2p]\nbootstrap = ['/ip4/1.2.3.4/tcp/1']\n",
            "p2p.bootstrap[0] must be a multiaddr ending in /p2p/",
        ),
        (
            "[p2p]\nmax_connections = 8\n",
            "p2p.max_connections (8) must be above p2p.pull_lists (8)",
        ),
        (
            "[p2p]\nrelays = ['/ip4/1.2.3.4/tcp/1']\n",
            "p2p.relays[0] must be a multiaddr ending in /p2p/",
        ),
        ("[generation]\ntemperature = 0.0\n", "generation.temperature = 0"),
    ],
)
def test_bad_config_is_one_clear_line_naming_file_and_key(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml", env={})


def test_overrides_apply_in_order_file_env_cli(tmp_path):
    path = _write(tmp_path, "[training]\nlr = 1e-3\n[node]\nname = 'a'\n")
    assert load_config(path, env={}).training.lr == 1e-3
    assert load_config(path, env={"SWARM__TRAINING__LR": "2e-3"}).training.lr == 2e-3
    config = load_config(
        path,
        ["training.lr=3e-3", "node.name=b", "p2p.bootstrap=['/ip4/1.2.3.4/tcp/1/p2p/x']"],
        env={"SWARM__TRAINING__LR": "2e-3"},
    )
    assert config.training.lr == 3e-3 and config.node.name == "b"
    assert config.p2p.bootstrap == ["/ip4/1.2.3.4/tcp/1/p2p/x"]
    with pytest.raises(ConfigError, match="^--set: unknown key training.nope"):
        load_config(path, ["training.nope=1"], env={})
    with pytest.raises(
        ConfigError,
        match="^environment variable SWARM__TRAINING__LR: training.lr: expected a number",
    ):
        load_config(path, env={"SWARM__TRAINING__LR": "fast"})
    # other SWARM_ variables are not config
    assert load_config(path, env={"SWARM_NODE_CACHE": "/tmp/x"}).node.name == "a"
    with pytest.raises(ConfigError, match="expected SWARM__<SECTION>__<KEY>"):
        load_config(path, env={"SWARM__TRAINING": "1"})
    with pytest.raises(ConfigError, match="expected section.key=value"):
        load_config(path, ["training.lr"], env={})


def test_custom_mix_builds_entries():
    config = build_config(
        {
            "tasks": {
                "preset": "custom",
                "mix": [{"dataset": "chain_sum", "weight": 2, "config": {"min_terms": 2}}],
            }
        }
    )
    (entry,) = task_mix(config)
    assert entry.dataset == "chain_sum" and entry.weight == 2.0 and entry.config == {"min_terms": 2}


def test_config_is_frozen_and_every_key_documented():
    config = load_config(None, env={})
    with pytest.raises(AttributeError):
        config.training.lr = 1.0  # type: ignore[misc]
    for key, _default, help_text in describe_config():
        assert help_text, f"{key} has no documentation"


def test_the_verification_worker_needs_room_besides_its_cache():
    config = build_config({})
    assert config.verify.worker and config.verify.group_deadline_s == 2.0
    build_config({"verify": {"task_cache_mb": 256}})  # 256 + 256 fits in half of 1024
    with pytest.raises(ConfigError, match="verify.task_cache_mb \\(300\\) plus 256 MB"):
        build_config({"verify": {"task_cache_mb": 300}})
    build_config({"verify": {"task_cache_mb": 300, "worker": False}})  # no worker, no bound
