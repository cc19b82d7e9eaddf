"""The memory plan of a config: `training.micro_batch_size = "auto"`, the refusal of a config
too large for the machine (one line naming the key), `config --plan`'s table, and `join`
refusing before any model loads. The machine's memory is set by hand."""

from __future__ import annotations

import re

import pytest

from swarm.cli import main
from swarm.config import memory
from swarm.config.build import build_config
from swarm.config.memory import PlanRefused, check_memory, config_plan, plan_table
from swarm.core.errors import ConfigError
from swarm.policy.memory import FIT_SHARE, MB, RUNTIME_CPU, WORKER, largest_micro_batch

LARGE = {  # 32 x 8 completions of 64 tokens, the update in one pass
    "generation": {"questions_per_round": 32, "max_new_tokens": 64},
    "training": {"own_groups": 32, "micro_batch_size": 256},
}


def _config(tmp_path, **sections):
    raw = {"node": {"run_dir": str(tmp_path / "run")}, "p2p": {"listen": "/ip4/127.0.0.1/tcp/0"}}
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return build_config(raw, "node.toml")


def _machine(monkeypatch, megabytes: float) -> None:
    """This machine has `megabytes` of RAM for the node."""
    size = int(megabytes * MB)
    monkeypatch.setattr(memory, "memory_there", lambda cuda, device: (size, size))


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run `swarm-node ARGS` here: (exit code, stdout, stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _peak_mb(config, micro_batch: int) -> float:
    return config_plan(config, micro_batch=micro_batch).plan.peak() / MB


@pytest.mark.parametrize("value", [16, 1, "auto"])
def test_micro_batch_size_takes_a_number_or_auto(tmp_path, value):
    config = _config(tmp_path, training={"micro_batch_size": value})
    assert config.training.micro_batch_size == value


@pytest.mark.parametrize("value", ["automatic", 1.5, True, 0])
def test_micro_batch_size_refuses_anything_else_in_one_line(tmp_path, value):
    with pytest.raises(ConfigError) as refused:
        _config(tmp_path, training={"micro_batch_size": value})
    message = str(refused.value)
    assert message.startswith("node.toml: training.micro_batch_size: ")
    assert "\n" not in message


def test_the_tiny_models_plan_has_every_part_and_fits_here(tmp_path):
    planned = config_plan(_config(tmp_path))
    names = [p.name for p in planned.plan.parts]
    for part in (
        "weights (fp32)",
        "fp32 master weights",
        "gradients (fp32)",
        "optimizer state",
        "generation (key/value cache, logits)",
        "activations, checkpointing off",
        "activations, checkpointing on",
        "verification worker",
    ):
        assert part in names
    assert planned.shape.parameters == 866_176  # the built model's count
    assert (planned.work.questions, planned.work.completions) == (16, 8)
    assert planned.work.update_rows == 128 and planned.work.micro_batch == 16
    assert planned.fits


def test_a_config_too_large_is_refused_naming_the_micro_batch(tmp_path, monkeypatch):
    config = _config(tmp_path, **LARGE)
    one_pass, eight = _peak_mb(config, 256), _peak_mb(config, 32)
    _machine(monkeypatch, (one_pass + eight) / 2 / FIT_SHARE)
    with pytest.raises(PlanRefused) as refused:
        check_memory(config, lambda *keys: "node.toml")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("node.toml: the memory plan needs ")
    assert 'set training.micro_batch_size = "auto"' in message
    fitting = int(message.split("at most ")[1].split()[0])
    assert 32 <= fitting < 256


def test_a_config_no_micro_batch_can_save_names_its_largest_part(tmp_path, monkeypatch):
    config = _config(
        tmp_path,
        generation={"batch_size": 4096, "questions_per_round": 512, "max_new_tokens": 200},
    )
    _machine(monkeypatch, 1500)
    with pytest.raises(PlanRefused) as refused:
        check_memory(config, lambda *keys: f"set by {keys[0]}")
    message = str(refused.value)
    assert message.startswith("set by generation.batch_size: ")
    assert "change generation.batch_size" in message


def test_auto_takes_the_largest_micro_batch_that_fits(tmp_path, monkeypatch):
    config = _config(
        tmp_path, **{**LARGE, "training": {"own_groups": 32, "micro_batch_size": "auto"}}
    )
    _machine(monkeypatch, _peak_mb(config, 40) / FIT_SHARE + 0.01)
    check_memory(config)  # fits: in several passes
    planned = config_plan(config)
    assert planned.auto and planned.work.micro_batch == 40
    device = int((_peak_mb(config, 40) / FIT_SHARE + 0.01) * MB)
    assert largest_micro_batch(planned.shape, planned.work, planned.setup, device, device) == 40


def test_an_observer_has_no_plan(tmp_path):
    assert config_plan(_config(tmp_path, node={"role": "observer"})) is None


def test_config_plan_prints_one_table(tmp_path, monkeypatch, capsys):
    _machine(monkeypatch, 4000)
    code, out, err = _cli(capsys, "config", "--plan", "--run-dir", str(tmp_path / "run"))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("memory plan of swarm-tiny on cpu: 16 questions x 8 completions")
    assert lines[1].split() == ["part", "when", "memory", "MB"]
    rows = {cells[0]: cells[1:] for cells in (re.split(r" {2,}", line) for line in lines[2:-1])}
    assert rows["optimizer state"] == ["always", "RAM", "6.6"]  # 866,176 x 2 x 4 bytes
    assert rows["activations, checkpointing on"][:2] == ["not used", "RAM"]
    assert rows["RAM available to this node"] == ["4,000.0"]
    assert float(rows["peak on the CPU's RAM"][0].replace(",", "")) > 470
    assert lines[-1].startswith("the plan fits")


def test_config_plan_shows_the_table_of_a_plan_it_refuses(tmp_path, monkeypatch, capsys):
    _machine(monkeypatch, 300)  # less than the runtime alone
    code, out, err = _cli(capsys, "config", "--plan", "--run-dir", str(tmp_path / "run"))
    assert code == 2
    assert out.splitlines()[-1].startswith("the plan does not fit")
    error = err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("error: defaults: the memory plan needs ")
    fixed = (RUNTIME_CPU + WORKER) / MB
    assert error[0].endswith(f"alone need {fixed:,.1f} MB: free memory on this machine")


def test_join_refuses_a_plan_that_does_not_fit_before_loading_a_model(
    tmp_path, monkeypatch, capsys
):
    import swarm.policy.model

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(swarm.policy.model, "load_policy", never)
    config = _config(tmp_path)
    _machine(monkeypatch, (_peak_mb(config, 128) + _peak_mb(config, 16)) / 2 / FIT_SHARE)
    args = ["join", "--run-dir", str(tmp_path / "run"), "--listen", "/ip4/127.0.0.1/tcp/0"]
    args += ["--set", "training.micro_batch_size=128", "--display", "none"]
    code, out, err = _cli(capsys, *args)
    assert code == 2, err
    assert err.startswith("error: --set: the memory plan needs ") and err.count("\n") == 1
    assert 'set training.micro_batch_size = "auto"' in err
    assert not (tmp_path / "run" / "node.log").exists()


def test_the_table_has_a_row_per_part(tmp_path):
    planned = config_plan(_config(tmp_path))
    lines = plan_table(planned)
    assert len(lines) == 2 + len(planned.plan.parts) + 3


def test_a_cuda_build_of_torch_is_read_from_its_version_file():
    assert memory.declares_cuda("__version__ = '2.13.0'\ncuda: Optional[str] = '13.0'\n")
    assert memory.declares_cuda("cuda = '12.8'")
    assert not memory.declares_cuda("cuda: Optional[str] = None\nhip: Optional[str] = '6.2'\n")


def test_a_cards_memory_is_asked_of_the_card_torch_numbers_that_way(monkeypatch):
    asked = []

    def smi(physical: str) -> int:
        asked.append(physical)
        return 80 << 30

    monkeypatch.setattr(memory, "smi_memory", smi)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert memory.card_memory(1) == 80 << 30
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    memory.card_memory(0)
    assert asked == ["3", "0"]
