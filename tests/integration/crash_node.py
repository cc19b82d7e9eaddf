"""A pre-loaded launcher of real nodes, for the kill -9 test (tests/integration/test_crash.py).

Importing torch, transformers and libp2p takes ~5 s of a node's start on 2 cores; twenty
kill-and-restart trials would spend most of their time there. This process imports them
once (starting no threads), then forks one node per command. Each child is an ordinary
`Node(load_config(path)).run()` in its own process, with its own pid, files and sockets,
so SIGKILL hits a real node exactly as it would hit `swarm-node join`.

Protocol (JSON lines): stdin `{"cmd": "run", "config": PATH, "log": PATH}` -> stdout
`{"pid": N}`; `{"cmd": "reap", "pid": N}` -> `{"pid": N, "exit": code_or_-signal}`.
Exits when stdin closes (its parent died) and never outlives --max-lifetime seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback


def child(config_path: str, log_path: str) -> None:
    """Run one node to its configured end; never returns."""
    code = 0
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        from swarm.config.load import load_config
        from swarm.node import Node

        node = Node(load_config(config_path))
        try:
            state = node.run()
        finally:
            node.close()
        print(f"stopped at round {state.round}", flush=True)
    except BaseException:  # noqa: BLE001 - report anything to the log; the exit code tells the test
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-lifetime", type=float, default=600.0)
    args = parser.parse_args()
    signal.alarm(int(args.max_lifetime))  # the launcher ends by itself whatever happens
    import swarm.node  # noqa: F401 - the point: pay for torch/transformers/libp2p imports once
    import swarm.p2p.libp2p  # noqa: F401

    print(json.dumps({"ready": True, "threads": threading.active_count()}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "run":
            pid = os.fork()
            if pid == 0:
                child(command["config"], command["log"])
            print(json.dumps({"pid": pid}), flush=True)
        elif command["cmd"] == "reap":
            _, status = os.waitpid(command["pid"], 0)
            code = os.waitstatus_to_exitcode(status)
            print(json.dumps({"pid": command["pid"], "exit": code}), flush=True)


if __name__ == "__main__":
    main()
