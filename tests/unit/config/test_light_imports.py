"""Checking a config imports neither torch nor transformers: a mistake is named within a second.

Each case runs the `swarm-node` entry point in a fresh interpreter and reports which of the
heavy packages it imported; `swarm-node config` runs every preflight check, so the default
built-in model's context check is covered too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers")

RUN = f"""
import json, sys
HEAVY = {HEAVY!r}
from swarm.cli import main
sys.argv = ["swarm-node", *json.loads(sys.argv[1])]
try:
    main()
    code = 0
except SystemExit as e:
    code = e.code
print(json.dumps({{"code": code, "heavy": [m for m in HEAVY if m in sys.modules]}}))
"""


def run_cli(args: list[str], cwd) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"stderr": done.stderr}


@pytest.mark.parametrize(
    "args",
    [
        ["config", "--run-dir", "run"],
        ["config", "--run-dir", "run", "--set", "policy.model=swarm-tiny-bpe"],
    ],
)
def test_config_checks_without_torch(tmp_path, args):
    result = run_cli(args, tmp_path)
    assert result["code"] == 0, result["stderr"]
    assert result["heavy"] == []


@pytest.mark.parametrize(
    "args",
    [
        ["config", "--set", "training.no_such_key=1"],
        ["join", "--set", "training.no_such_key=1"],
        ["join", "--set", "generation.max_new_tokens=4096"],
    ],
)
def test_config_errors_without_torch(tmp_path, args):
    result = run_cli([*args, "--run-dir", "run"], tmp_path)
    assert result["code"] == 2
    assert len(result["stderr"].strip().splitlines()) == 1, result["stderr"]
    assert result["heavy"] == []


@pytest.mark.parametrize("name", ["swarm-tiny", "swarm-tiny-bpe"])
def test_light_tokenizer_counts_as_the_full_one(name):
    from swarm.policy.prompts import build_prompt
    from swarm.policy.tiny import TINY_MODELS, build_tokenizer
    from swarm.policy.tiny_context import light_tokenizer

    full, light = build_tokenizer(TINY_MODELS[name]), light_tokenizer(name)
    for question in ("What is 3 + 4?", "x <answer>12</answer> y\n\tz é", "  spaces  ", "</s><pad>"):
        for system in ("", "You are a careful solver."):
            prompt = build_prompt(full, question, system)
            assert build_prompt(light, question, system) == prompt
            expected = full(prompt, add_special_tokens=False, verbose=False)["input_ids"]
            assert light(prompt, add_special_tokens=False)["input_ids"] == expected
