"""reasoning-gym datasets loaded one at a time: same tasks as the whole library, far less loaded.

Each check runs in a fresh interpreter, since what is imported is the point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run_python(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


QUESTIONS = """
import json, sys
from swarm.tasks import EASY_MIX, SAPO_MIX, TaskSpec, build_task
{prelude}
out = {{}}
for e in EASY_MIX + SAPO_MIX:
    for index in (0, 7):
        task = build_task(TaskSpec.make(e.dataset, e.config, 11, index))
        out[f"{{e.dataset}}:{{index}}"] = [task.question, task.answer]
rg = [m for m in sys.modules if m == "reasoning_gym" or m.startswith("reasoning_gym.")]
print(json.dumps({{"questions": out, "modules": len(rg), "matplotlib": "matplotlib" in sys.modules}}))
"""


def test_tasks_are_the_ones_the_whole_library_builds():
    lean = run_python(QUESTIONS.format(prelude=""))
    whole = run_python(QUESTIONS.format(prelude="import reasoning_gym"))
    assert lean["questions"] == whole["questions"]
    assert lean["modules"] < whole["modules"] / 3
    assert not lean["matplotlib"] and whole["matplotlib"]


def test_the_easy_mix_loads_only_its_dataset():
    code = """
import json, sys
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.tasks.datasets import loaded_datasets
build_task(TaskSpec.make(EASY_MIX[0].dataset, EASY_MIX[0].config, 0, 0))
print(json.dumps(sorted(loaded_datasets())))
"""
    # composite is registered by reasoning-gym's shared code, which every dataset imports
    assert set(run_python(code)) - {"composite"} == {"chain_sum"}


def test_the_name_index_is_every_registered_dataset():
    code = """
import json
from swarm.tasks.datasets import dataset_names
names = dataset_names()
import reasoning_gym
from reasoning_gym.factory import DATASETS
print(json.dumps({"index": sorted(names), "registered": sorted(DATASETS)}))
"""
    out = run_python(code)
    assert out["index"] == out["registered"] and len(out["index"]) > 100


def test_a_plain_import_afterwards_still_gets_the_whole_library():
    code = """
import json
from swarm.tasks import EASY_MIX, TaskSpec, build_task
build_task(TaskSpec.make(EASY_MIX[0].dataset, EASY_MIX[0].config, 0, 0))
import reasoning_gym
from reasoning_gym.arithmetic import LegCountingDataset
ds = reasoning_gym.create_dataset("leg_counting", seed=1, size=3)
from reasoning_gym.factory import DATASETS
print(json.dumps({"question": ds[0]["question"][:20], "registered": len(DATASETS),
                  "cls": LegCountingDataset.__name__}))
"""
    out = run_python(code)
    assert out["registered"] > 100 and out["cls"] == "LegCountingDataset" and out["question"]


def test_an_unknown_name_is_refused_without_loading_the_library():
    code = """
import json, sys
from swarm.core.errors import TaskError
from swarm.tasks import TaskSpec, build_task
try:
    build_task(TaskSpec.make("no_such_dataset", {}, 0, 0))
    error = ""
except TaskError as e:
    error = str(e)
print(json.dumps({"error": error, "loaded": "reasoning_gym" in sys.modules}))
"""
    out = run_python(code)
    assert "not registered" in out["error"] and not out["loaded"]
