"""The generator tests at both ends of the supported transformers range.

pyproject.toml declares transformers>=5.17,<6. The suite runs under the venv's transformers
(set-up installs the newest the range allows: 5.25.0 at the time of writing); the oldest,
5.17.0, is what the GPU machine's image has and what constraints/gpu.txt pins, so a GPU node
runs it. `scripts/setup.sh` installs it (constraints/transformers-oldest.txt: transformers
and the huggingface-hub it needs) apart from the venv, in .venv/compat/transformers-<version>;
here the generator and model-loading tests (`GENERATOR_TESTS`) run again in a child process
with that folder first on PYTHONPATH, no network needed. Where the folder is missing this
fails in CI (`CI` set, as CI services set it) and is skipped elsewhere, naming the command.

Also checked: the range, the oldest pin, the GPU pin and the venv agree.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
OLDEST = ROOT / "constraints" / "transformers-oldest.txt"
SETUP = "scripts/setup.sh"
# Generation (plain, shared prefill, continuous batching), model loading and GGUF conversion,
# the trainer's log-probs and shared prefix (transformers' cache internals), prompts,
# tokenization and model identity: what a node does with transformers. About 25 s.
GENERATOR_TESTS = [
    "tests/unit/policy/test_policy.py",
    "tests/unit/policy/test_shared_prefill.py",
    "tests/unit/policy/test_continuous_generator.py",
    "tests/unit/policy/test_paged_decoder.py",
    "tests/unit/policy/test_decode_scaling.py",
    "tests/unit/policy/test_decode_plan.py",
    "tests/unit/policy/test_prefix.py",
    "tests/unit/policy/test_gguf.py",
    "tests/unit/policy/test_model_identity.py",
    "tests/unit/policy/test_shipped_models.py",
    "tests/unit/policy/test_prompt_format.py",
    "tests/unit/policy/test_retokenize.py",
]


def _pins(path: Path) -> dict[str, str]:
    """name -> version of each `name==version` line of a constraints file."""
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), flags=re.M))


def _declared() -> Requirement:
    """The project's transformers requirement (pyproject.toml's dependencies)."""
    text = (ROOT / "pyproject.toml").read_text()
    (line,) = re.findall(r'^\s*"(transformers[^"]*)"', text, flags=re.M)
    return Requirement(line)


def oldest() -> str:
    return _pins(OLDEST)["transformers"]


def compat_folder() -> Path:
    return ROOT / ".venv" / "compat" / f"transformers-{oldest()}"


def test_the_range_starts_at_the_oldest_pin_which_the_gpu_install_uses():
    declared = _declared()
    lowest = {Version(s.version) for s in declared.specifier if s.operator == ">="}
    assert lowest == {Version(oldest())}, f"{declared} does not start at {oldest()} ({OLDEST.name})"
    assert _pins(ROOT / "constraints" / "gpu.txt")["transformers"] == oldest()


def test_the_venvs_transformers_is_in_the_range():
    import transformers

    assert _declared().specifier.contains(transformers.__version__), transformers.__version__


def test_the_generator_tests_pass_under_the_oldest_transformers():
    folder = compat_folder()
    if not (folder / "transformers").is_dir():
        why = f"{folder.relative_to(ROOT)} is missing: {SETUP} installs it ({OLDEST.name})"
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(why)
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    child = (
        "import sys, transformers; "
        f"assert transformers.__version__ == {oldest()!r}, transformers.__version__; "
        "import pytest; "
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[1:]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, *GENERATOR_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, (
        f"under transformers {oldest()}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    )
    assert re.search(r"\d+ passed", done.stdout), done.stdout[-2000:]
