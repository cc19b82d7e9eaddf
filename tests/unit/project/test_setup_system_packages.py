"""`scripts/setup.sh` installs no system package unless asked: without `--system-packages` or
SWARM_SETUP_SYSTEM=1 it calls no apt-get, even as root, and says which command would install
the NAT test's tools; asked, it installs them. Run on its functions (sourced) with a PATH of
stand-ins: an `apt-get` that records its calls, an `id` that says root, no `ip` or
`iptables`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration import netns

ROOT = Path(__file__).resolve().parents[3]
SETUP = ROOT / "scripts" / "setup.sh"


def stand_ins(folder: Path, log: Path) -> Path:
    """A bin folder: apt-get records its arguments in `log`, id says root (uid 0), timeout
    runs its command; nothing else (no ip, no iptables)."""
    folder.mkdir()
    scripts = {
        "apt-get": f'#!/bin/sh\necho "apt-get $*" >> "{log}"\n',
        "id": "#!/bin/sh\necho 0\n",
        "timeout": '#!/bin/sh\nshift\nexec "$@"\n',
    }
    for name, text in scripts.items():
        path = folder / name
        path.write_text(text)
        path.chmod(0o755)
    return folder


def set_up_tools(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    """Source setup.sh and run its system-package step as `main` does, with `args`; the
    apt-get calls made and the messages printed."""
    log = tmp_path / "apt-get.log"
    log.touch()
    path = stand_ins(tmp_path / "bin", log)
    script = f'source "{SETUP}"; nat_test_tools "$(system_packages "$@")"'
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, "-c", script, "setup.sh", *args],
        env={"PATH": str(path), **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines(), done.stderr


def test_without_the_flag_no_apt_get_runs_even_as_root_and_the_note_names_the_command(
    tmp_path,
):
    calls, said = set_up_tools(tmp_path, "gpu")
    assert calls == []
    assert "iproute2 iptables missing" in said and "NAT test will be skipped" in said
    assert netns.SYSTEM_SETUP in said  # the command the NAT test's skip reason names too


@pytest.mark.parametrize("env", ["0", ""])
def test_a_variable_other_than_1_asks_for_nothing(tmp_path, env):
    calls, _ = set_up_tools(tmp_path, env={"SWARM_SETUP_SYSTEM": env})
    assert calls == []


@pytest.mark.parametrize(
    "args, env",
    [
        (("--system-packages",), {}),
        (("gpu", "--system-packages"), {}),
        ((), {"SWARM_SETUP_SYSTEM": "1"}),
    ],
)
def test_asked_by_the_flag_or_the_variable_it_installs_the_tools(tmp_path, args, env):
    calls, _ = set_up_tools(tmp_path, *args, env=env)
    assert calls[0] == "apt-get update -qq"
    assert calls[1].startswith("apt-get install") and calls[1].endswith("iproute2 iptables")


def test_ci_sets_the_variable_on_the_readme_test_command():
    """.ci/run runs the README's test command with SWARM_SETUP_SYSTEM=1, and the README says so."""
    command = "scripts/setup.sh && .venv/bin/python -m pytest -n 2"
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"SWARM_SETUP_SYSTEM=1 {command}" in ci.splitlines()
    readme = (ROOT / "README.md").read_text()
    assert command in readme and "SWARM_SETUP_SYSTEM=1" in readme
