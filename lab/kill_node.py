"""The kill loop's node processes: a launcher that imports torch and libp2p once, then forks
one node per JSON command on stdin (`run` a config, `reap` a pid), each an ordinary `Node` on
a transport that notes in a marks file when it enters and leaves a delta fetch (F/f), a
ledger write (L/l) and its first round (S): plain appends, visible after a kill.

    python -m lab.kill_node --max-lifetime SECONDS

`lab.kill_loop` starts it. Every process here ends by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

from swarm.p2p.transport import Transport


def child(config_path: str, marks_path: str, log_path: str, lifetime: float) -> None:
    """Run one node until SIGTERM (then stop cleanly) or SIGKILL; never returns. It also
    ends if the launcher is gone, and after `lifetime` seconds whatever happens."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    marks = os.open(marks_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    code = 0
    try:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(int(lifetime))
        launcher_pid = os.getppid()
        threading.Thread(target=_end_when_orphaned, args=(launcher_pid,), daemon=True).start()
        node = build_node(config_path, lambda b: os.write(marks, b))
        signal.signal(signal.SIGTERM, lambda *_: node.request_stop())
        try:
            node.run()
        finally:
            node.close()
    except BaseException:  # noqa: BLE001 - reported in the log; the exit code tells the loop
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _end_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(2)


def build_node(config_path: str, mark):
    """A node whose delta fetches, ledger writes, start and rounds are marked."""
    from sqlalchemy import event
    from sqlalchemy.orm import Session

    from swarm.config.load import load_config
    from swarm.monitor.display import LineReporter
    from swarm.node import Node, make_transport
    from swarm.node.makers import node_identity

    mark(b"B")  # born: everything until "S" is starting (loading, resuming)
    event.listen(Session, "before_flush", lambda *_: mark(b"L"))
    for name in ("after_commit", "after_rollback"):
        event.listen(Session, name, lambda *_: mark(b"l"))

    class Marked(LineReporter):
        def start(self, info) -> None:
            mark(b"S")
            super().start(info)

        def round(self, report) -> None:
            mark(b"r")
            super().round(report)

    config = load_config(config_path)
    key_pair = node_identity(config)
    transport = MarkedTransport(make_transport(config, key_pair), mark)
    return Node(config, transport=transport, reporter=Marked(), key_pair=key_pair)


class MarkedTransport(Transport):
    """A node's transport, with its fetches of delta payloads marked ("F" ... "f")."""

    def __init__(self, inner: Transport, mark) -> None:
        self.inner, self.mark, self.peer_id = inner, mark, inner.peer_id

    def fetch_blob(self, peer_id, key, timeout=30.0, limits=None):
        if key.endswith("/index"):
            return self.inner.fetch_blob(peer_id, key, timeout, limits)
        self.mark(b"F")
        try:
            return self.inner.fetch_blob(peer_id, key, timeout, limits)
        finally:
            self.mark(b"f")

    def start(self):
        self.inner.start()

    def close(self):
        self.inner.close()

    def subscribe(self, topic, validator=None):
        self.inner.subscribe(topic, validator)

    def publish(self, topic, data):
        self.inner.publish(topic, data)

    def receive(self, max_messages=None, timeout=0.0):
        return self.inner.receive(max_messages, timeout)

    def peers(self):
        return self.inner.peers()

    def listen_addrs(self):
        return self.inner.listen_addrs()

    def serve_blob(self, key, data):
        self.inner.serve_blob(key, data)

    def unserve_blob(self, key):
        self.inner.unserve_blob(key)

    def served_blobs(self, prefix=""):
        return self.inner.served_blobs(prefix)

    def stats(self):
        return self.inner.stats()

    def set_refusal_hook(self, hook):
        self.inner.set_refusal_hook(hook)

    def __getattr__(self, name):
        return getattr(self.inner, name)  # flush, wait_for_topic_peers, ...


def launcher(max_lifetime: float) -> None:
    """Import once, then fork one node per JSON command on stdin (see `Launcher`)."""
    signal.alarm(int(max_lifetime))
    import swarm.node.lifecycle  # noqa: F401 - pay for torch, transformers, libp2p once
    import swarm.p2p.libp2p  # noqa: F401
    from swarm.policy.model import load_policy
    from swarm.policy.tiny import ensure_tiny_model
    from swarm.tasks import EASY_MIX, build_task, sample_specs

    # ... and for what loading a model and building tasks import on first use.
    load_policy(str(ensure_tiny_model(quiet=True)), device="cpu", dtype="float32")
    for spec in sample_specs(EASY_MIX, seed=0, round_index=0, count=8):
        build_task(spec)
    print(json.dumps({"ready": True, "threads": threading.active_count()}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "run":
            pid = os.fork()
            if pid == 0:
                child(command["config"], command["marks"], command["log"], max_lifetime)
            print(json.dumps({"pid": pid}), flush=True)
        elif command["cmd"] == "reap":
            _, status = os.waitpid(command["pid"], 0)
            print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


def main(argv: list[str] | None = None) -> int:
    """The launcher: `--max-lifetime` seconds at most, whatever happens."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-lifetime", type=float, default=3600.0, help="seconds at most")
    launcher(parser.parse_args(argv).max_lifetime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
