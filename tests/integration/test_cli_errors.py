"""A new user's mistakes, one by one: each is one line on stderr (no traceback), exit code 2.

Walks the command line itself (bare command, unknown option or command, missing argument,
a value of the wrong type), help and version, then the config mistakes `join` used to meet
only after loading a model: every one is caught by `swarm-node config -c` with the very
message `join` gives, and `join` gives it within a few seconds. Nothing here loads a model
(the context-length check builds the tiny model's tokenizer only).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from swarm.core.identity import create_identity, peer_id_of, save_identity

FAST_FAIL_S = (
    5.0  # CPU s: `join` refuses a bad config before loading anything (measured: 0.2-1.5 s)
)
# Cases that must import torch to tell (is there CUDA?) may take, on top, what importing
# torch takes on this machine, measured in the test (2-5 CPU s on 2 busy cores).
NEEDS_TORCH = ("cuda without CUDA",)
PEER = "12D3KooWLp6Fy6k9RjqjvRL2FaZg1x1A1uvBmUuUxsyDAzDzE7oa"


ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
    )


def _one_line_error(result, exit_code: int = 2) -> str:
    """The single stderr line of a refused command (asserting it is exactly that)."""
    assert result.returncode == exit_code, (
        result.returncode,
        result.stdout[-2000:],
        result.stderr[-2000:],
    )
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# -- the command line itself -------------------------------------------------------------------


def test_bare_command_shows_help_and_exits_0():
    result = _cli()
    assert result.returncode == 0 and result.stdout.startswith(
        "Usage: swarm-node [OPTIONS] COMMAND"
    )
    assert "join" in result.stdout and not result.stderr
    group = _cli("cluster")  # a group without its command: its help, the same way
    assert group.returncode == 0 and "Usage: swarm-node cluster" in group.stdout


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--bogus"], "error: no such option: --bogus; see 'swarm-node --help'"),
        (["frob"], "error: no such command 'frob' (commands: join, init,"),
        (
            ["join", "--rund", "3"],
            "error: no such option --rund (did you mean --rounds?); see 'swarm-node join --help'",
        ),
        (["ban"], "error: missing argument 'PEER'; see 'swarm-node ban --help'"),
        (["join", "--rounds", "abc"], "error: invalid value for '--rounds'"),
        (["cluster", "init", "--nodes", "many"], "see 'swarm-node cluster init --help'"),
    ],
)
def test_usage_errors_are_one_line_naming_the_help(args, expected):
    assert expected in _one_line_error(_cli(*args))


def test_version():
    import swarm

    result = _cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"swarm-node {swarm.__version__}"


# Without a terminal (CI) typer cannot detect the shell; this switch makes the completion
# options take the shell as their value instead.
EXPLICIT_SHELL = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}


def test_shell_completion(tmp_path):
    script = _cli("--show-completion", "bash", env=EXPLICIT_SHELL)
    assert script.returncode == 0 and "_SWARM_NODE_COMPLETE=complete_bash" in script.stdout
    words = _cli(
        env={
            "_SWARM_NODE_COMPLETE": "complete_bash",
            "COMP_WORDS": "swarm-node jo",
            "COMP_CWORD": "1",
        }
    )
    assert words.returncode == 0 and words.stdout.split() == ["join"]
    options = _cli(
        env={
            "_SWARM_NODE_COMPLETE": "complete_bash",
            "COMP_WORDS": "swarm-node join --ro",
            "COMP_CWORD": "2",
        }
    )
    assert options.stdout.split() == ["--rounds"]
    installed = _cli("--install-completion", "bash", env={"HOME": str(tmp_path), **EXPLICIT_SHELL})
    assert installed.returncode == 0 and (tmp_path / ".bash_completions" / "swarm-node.sh").exists()


def test_help_is_verbatim_and_explains_every_option():
    import typer

    from swarm.cli import app

    join_help = _cli("join", "--help").stdout
    assert "SWARM__<SECTION>__<KEY>" in join_help  # markdown made this "SWARM____"
    assert "runs/demo-<time>" in _cli("demo", "--help").stdout  # and this "runs/demo-"

    def walk(command, path):
        for param in command.params:
            if param.name in ("help",):
                continue
            yield path, param
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    undocumented = [
        f"{path}: {p.name}"
        for path, p in walk(typer.main.get_command(app), "swarm-node")
        if not (getattr(p, "help", None) or "").strip()
    ]
    assert not undocumented, undocumented


# -- config mistakes: caught by `config -c` exactly as by `join`, before any model load -----------


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _member_folder(root: Path, listed: list[str] | None = None) -> Path:
    """A run folder holding an identity (not on the allow-list unless `listed` says so)."""
    folder = root / "member"
    key = create_identity()
    save_identity(key, folder / "identity.key")
    if listed is not None:
        listed.append(peer_id_of(key))
    return folder


def _bad_configs(root: Path, busy_port: int) -> list[tuple[str, str, str]]:
    """(case, config text, expected message part); run_dir is relative to the config file."""
    folder_of_stranger = _member_folder(root / "stranger")
    no_tokenizer = root / "model-without-tokenizer"
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_text('{"model_type": "llama"}')
    (no_tokenizer / "model.safetensors").write_bytes(b"")
    (root / "garbage.key").write_text("not a key\n")
    (root / "a-file").write_text("")
    return [
        (
            "listen not a multiaddr",
            '[p2p]\nlisten = "localhost:4001"\n',
            "p2p.listen: listen address 'localhost:4001' is not a multiaddr",
        ),
        (
            "listen port in use",
            f'[p2p]\nlisten = "/ip4/127.0.0.1/tcp/{busy_port}"\n',
            f"port {busy_port} on 127.0.0.1 is already in use",
        ),
        (
            "listen address not ours",
            '[p2p]\nlisten = "/ip4/192.0.2.1/tcp/4001"\n',
            "192.0.2.1 is not an address of this machine",
        ),
        (
            "bootstrap bad peer ID",
            '[p2p]\nbootstrap = ["/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWnope"]\n',
            "p2p.bootstrap[0]: bootstrap address",
        ),
        (
            "bootstrap not tcp",
            f'[p2p]\nbootstrap = ["/ip4/127.0.0.1/udp/4001/p2p/{PEER}"]\n',
            "must be /ip4/<ip>/tcp/<port>/p2p/12D3KooW...",
        ),
        (
            "allow-list bad peer ID",
            '[p2p]\nallow_list = ["alice"]\n',
            "p2p.allow_list[0]: 'alice' is not a peer ID",
        ),
        (
            "psk file missing",
            '[p2p]\npsk_file = "nowhere/swarm.key"\n',
            "p2p.psk_file: cannot read private-network key",
        ),
        (
            "psk file not a key",
            f'[p2p]\npsk_file = "{root / "garbage.key"}"\n',
            "not a private-network key",
        ),
        (
            "identity missing, allow-list set",
            f'[node]\nrun_dir = "empty"\n[p2p]\nallow_list = ["{PEER}"]\n',
            "no identity at",
        ),
        (
            "identity not on the allow-list",
            f'[node]\nrun_dir = "{folder_of_stranger}"\n[p2p]\nallow_list = ["{PEER}"]\n',
            f"which is not on p2p.allow_list ({PEER})",
        ),
        (
            "run folder is a file",
            f'[node]\nrun_dir = "{root / "a-file"}"\n',
            "is a file, not a folder",
        ),
        (
            "run folder under a file",
            f'[node]\nrun_dir = "{root / "a-file" / "x"}"\n',
            "cannot be created",
        ),
        (
            "metrics address without a port",
            '[monitor]\nmetrics = "9400"\n',
            "monitor.metrics = '9400': expected HOST:PORT",
        ),
        (
            "metrics port in use",
            f'[monitor]\nmetrics = "127.0.0.1:{busy_port}"\n',
            f"monitor.metrics = '127.0.0.1:{busy_port}': port {busy_port} on 127.0.0.1 is "
            "already in use",
        ),
        (
            "unknown dataset",
            '[tasks]\npreset = "custom"\nmix = [{dataset = "no_such_dataset"}]\n',
            "cannot build dataset 'no_such_dataset'",
        ),
        (
            "dataset config",
            '[tasks]\npreset = "custom"\n'
            'mix = [{dataset = "chain_sum", config = {min_terms = "two"}}]\n',
            "cannot build dataset 'chain_sum'",
        ),
        (
            "model path missing",
            '[policy]\nmodel = "/no/such/model"\n',
            "policy.model = '/no/such/model': no such folder",
        ),
        ("model without tokenizer", f'[policy]\nmodel = "{no_tokenizer}"\n', "has no tokenizer"),
        (
            "built-in model typo",
            '[policy]\nmodel = "swarm-tiny-xl"\n',
            "no built-in model of that name",
        ),
        ("cuda without CUDA", '[policy]\ndevice = "cuda"\n', "needs CUDA")
        if not _has_cuda()
        else ("vllm missing", '[generation]\nbackend = "vllm"\n', "needs the vllm package"),
    ]


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _timed_cli(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """`_cli`, with the CPU seconds the command used (its own, whatever else runs meanwhile)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "swarm.cli", *args],
            stdout=out,
            stderr=err,
            text=True,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": path},
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    return result, usage.ru_utime + usage.ru_stime


def _import_cpu_s(module: str, cwd: Path) -> float:
    """The CPU seconds a Python process takes to import `module`, here and now."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-c", f"import {module}"], stdout=out, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_utime + usage.ru_stime


def _config_then_join(path: Path, cwd: Path) -> tuple[str, str, float]:
    """What `config -c` and `join -c` say of one file, and the CPU seconds `join` took."""
    checked = _one_line_error(_timed_cli("config", "-c", str(path), cwd=cwd)[0])
    joined, cpu_s = _timed_cli("join", "-c", str(path), "--display", "none", cwd=cwd)
    return checked, _one_line_error(joined), cpu_s


def test_every_config_error_join_would_hit_is_caught_by_config_first(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        cases = _bad_configs(tmp_path, busy.getsockname()[1])
        paths = [
            _write(tmp_path / case.replace(" ", "-").replace(",", "") / "node.toml", text)
            for case, text, _ in cases
        ]
        with ThreadPoolExecutor(2) as pool:  # two cases at a time; CPU time is each its own
            said = list(pool.map(lambda p: _config_then_join(p, tmp_path), paths))
            torch_s = _import_cpu_s("torch", tmp_path)
    finally:
        busy.close()
    for (case, _, expected), path, (checked, joined, cpu_s) in zip(cases, paths, said, strict=True):
        assert expected in checked and str(path) in checked, (case, checked)
        assert joined == checked, (case, joined, checked)
        bound = FAST_FAIL_S + (torch_s if case in NEEDS_TORCH else 0.0)
        assert cpu_s < bound, f"{case}: join took {cpu_s:.1f} CPU s to refuse (bound {bound:.1f})"
        print(f"{cpu_s:4.1f}s {joined}")


def test_errors_name_the_option_that_set_the_value(tmp_path):
    path = _write(tmp_path / "node.toml", "[sync]\nkeep_deltas = 20\n")
    cases = [
        (["config", "--set", "tasks.preset=custom"], "error: --set: tasks.mix must list datasets"),
        (
            ["config", "-c", str(path), "--set", "sync.anchor_every=30"],
            "error: --set: sync.keep_deltas (20) must be at least",
        ),
        (["join", "--rounds", "-1"], "error: --rounds: node.rounds: -1 is below the minimum 0"),
        (["join", "--bootstrap", "/ip4/127.0.0.1/tcp/1"], "error: --bootstrap: p2p.bootstrap[0]"),
        (["join", "--listen", "/ip4/127.0.0.1/udp/1"], "error: --listen: p2p.listen"),
        (
            ["join", "--model", "/no/such/model"],
            "error: --model: policy.model = '/no/such/model': no such folder",
        ),
        (
            ["config", "--set", "p2p.allow_list=[abc]"],
            "error: --set: p2p.allow_list: '[abc]' is not a TOML list: quote",
        ),
    ]
    for args, expected in cases:
        assert _one_line_error(
            _cli(*args, "--set", f'node.run_dir="{tmp_path / "run"}"')
        ).startswith(expected), args


def test_tiny_model_refuses_the_sapo_mix_it_cannot_fit(tmp_path):
    message = _one_line_error(
        _cli("config", "--set", "tasks.preset=sapo", "--set", f'node.run_dir="{tmp_path}"')
    )
    assert (
        "exceeds the 256 positions of 'swarm-tiny'" in message
        and 'tasks.preset = "easy"' in message
    )
    fits = _cli("config", "--set", f'node.run_dir="{tmp_path}"')  # the easy mix fits
    assert fits.returncode == 0, fits.stderr


# -- run folders ----------------------------------------------------------------------------------


def test_a_hub_model_neither_cached_nor_reachable_is_one_line_before_any_identity(tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused at once
    env = {
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
        "HF_ENDPOINT": f"http://127.0.0.1:{closed.getsockname()[1]}",
        "HF_HUB_OFFLINE": "",
        "TRANSFORMERS_OFFLINE": "",
    }
    model = "--set=policy.model=Qwen/Qwen2.5-0.5B-Instruct"
    try:
        checked = _one_line_error(
            _cli("config", model, "--set=node.run_dir=r", cwd=tmp_path, env=env)
        )
        started = time.monotonic()
        joined = _one_line_error(_cli("join", model, "--run-dir=r", cwd=tmp_path, env=env))
        took = time.monotonic() - started
    finally:
        closed.close()
    assert "download it first" in checked and "HF_HUB_OFFLINE" in checked, checked
    assert "policy.model" in joined and "download it first" in joined, joined
    assert not (tmp_path / "r" / "identity.key").exists()
    assert not (tmp_path / "r" / "ledger.sqlite").exists()
    assert took < 30, took  # no retries (they took 47 s); a loaded machine still starts Python


def test_init_refuses_what_join_refuses_and_a_lost_key_is_not_replaced(tmp_path):
    out = tmp_path / "cluster"
    made = _cli("cluster", "init", "--nodes", "1", "--out", str(out), "--base-port", "4710")
    assert made.returncode == 0, made.stderr
    member = out / "member-0"
    (member / "identity.key").unlink()  # a member whose key was lost
    for command in ("init", "join"):  # config: in the bad configs above
        line = _one_line_error(_cli(command, "-c", str(member / "config.toml")))
        assert "no identity at" in line and "p2p.allow_list" in line, (command, line)
    assert not (member / "identity.key").exists()

    from swarm.ledger import Ledger

    solo = tmp_path / "solo"
    solo.mkdir()
    Ledger(f"sqlite:///{solo / 'ledger.sqlite'}").close()  # a run folder that has run, key lost
    for command in ("init", "join"):
        line = _one_line_error(_cli(command, "--run-dir", str(solo), cwd=tmp_path))
        assert "holds a ledger but no identity.key" in line, (command, line)
    assert not (solo / "identity.key").exists()


def test_an_identity_open_to_others_is_made_private_and_said_so(tmp_path):
    assert _cli("init", "--run-dir", "n", cwd=tmp_path).returncode == 0
    key = tmp_path / "n" / "identity.key"
    key.chmod(0o644)
    again = _cli("init", "--run-dir", "n", cwd=tmp_path)
    assert again.returncode == 0 and "existing identity" in again.stdout
    assert "(mode 0644): made private (0600)" in again.stderr, again.stderr
    assert key.stat().st_mode & 0o777 == 0o600


def test_a_second_join_on_a_run_folder_is_refused_naming_the_holder(tmp_path):
    from swarm.node.runlock import RunLock

    lock = RunLock.acquire(tmp_path)  # this process plays the running node
    try:
        started = time.perf_counter()
        message = _one_line_error(_cli("join", "--run-dir", str(tmp_path)))
        assert f"run folder {tmp_path} is in use by process {os.getpid()}" in message
        assert time.perf_counter() - started < FAST_FAIL_S
    finally:
        lock.release()


def test_unwritable_run_folders_are_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert "cannot be created" in _one_line_error(_cli("join", "--run-dir", str(blocker / "run")))
    demo = _one_line_error(
        _cli("demo", "--nodes", "1", "--rounds", "1", "--out", str(blocker / "demo"))
    )
    assert "cannot create the demo folder" in demo and "--out" in demo


# -- private clusters: relative paths, identities never overwritten, unlisted members refused -----


def test_a_moved_cluster_still_works_and_keys_are_never_overwritten(tmp_path):
    out = tmp_path / "cluster"
    assert (
        _cli("cluster", "init", "--nodes", "2", "--out", str(out), "--base-port", "4700").returncode
        == 0
    )
    identity = (out / "member-0" / "identity.key").read_bytes()
    moved = tmp_path / "elsewhere" / "cluster"
    moved.parent.mkdir()
    shutil.move(out, moved)
    ok = _cli("config", "-c", str(moved / "member-0" / "config.toml"))
    assert ok.returncode == 0, ok.stderr  # run_dir and psk_file follow the config file
    assert f'"run_dir": "{moved / "member-0"}"' in ok.stdout
    assert not (out / "member-0").exists()  # nothing was recreated at the old place

    # init over an existing member's identity: refused, the key untouched
    (moved / "swarm.key").unlink()
    (moved / "cluster.json").unlink()
    again = _one_line_error(_cli("cluster", "init", "--nodes", "2", "--out", str(moved)))
    assert "identity.key already exists" in again
    assert (moved / "member-0" / "identity.key").read_bytes() == identity

    # a member whose identity is someone else's: refused, naming its peer ID and the allow-list
    stranger = create_identity()
    (moved / "member-1" / "identity.key").unlink()
    save_identity(stranger, moved / "member-1" / "identity.key")
    refused = _one_line_error(_cli("join", "--config", str(moved / "member-1" / "config.toml")))
    assert f"peer {peer_id_of(stranger)}, which is not on p2p.allow_list (12D3KooW" in refused
