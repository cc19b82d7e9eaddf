"""`swarm-node join` in a process of its own, for benchmarks: started, and ready once it
has written its node.json (its listen address)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

READY_TIMEOUT_S = 300.0


def start_join(
    run_dir: Path, sets: list[str], log_path: Path, *, name: str = "node", env: dict | None = None
) -> tuple[subprocess.Popen, IO[str], str]:
    """Start `swarm-node join --run-dir run_dir` on 127.0.0.1 with each `--set` of `sets`, its
    output to `log_path`; wait until it is listening. Returns (process, log, first address)."""
    cmd = [str(Path(sys.executable).parent / "swarm-node"), "join", "--run-dir", str(run_dir)]
    cmd += ["--listen", "/ip4/127.0.0.1/tcp/0"]
    for s in sets:
        cmd += ["--set", s]
    log = open(log_path, "w")  # noqa: SIM115 - the caller closes it when it stops the process
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env or dict(os.environ)
    )
    info = run_dir / "node.json"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not info.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the {name} did not start (see {log_path})")
        time.sleep(0.5)
    time.sleep(0.5)
    return proc, log, json.loads(info.read_text())["addrs"][0]
