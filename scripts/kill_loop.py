"""kill -9 loop: a trainer and a follower on 127.0.0.1, one of them killed at random moments.

Two real nodes, each an ordinary `Node` in its own process: a trainer publishing a sparse
delta after every update, and a generator-role node following it over libp2p. Again and
again one of them is sent SIGKILL while it is in a round, fetching a delta or writing its
ledger, and restarted on the same run folder. Each node process notes the moments it enters
and leaves a delta fetch and a ledger write in a marks file (plain appends, visible after a
kill), so the loop can aim at a phase, and says afterwards which phase each kill hit.

After every kill it checks the killed node's ledger: `PRAGMA integrity_check` is "ok";
every row committed before the kill is there after the restart, unchanged but for the
columns a resume may update (`superseded`, a peer's last-seen time); no row appears twice;
live round numbers are unique and contiguous; `swarm-node doctor` finds no problem; and the
node resumes (commits a new round). At the end both nodes stop cleanly.

    python scripts/kill_loop.py                    # 50 kills, a table, runs/kill_loop.json
    python scripts/kill_loop.py --kills 10 --json /tmp/k.json --seed 3

Nodes are forked from a launcher that has already imported torch and libp2p, so a restart
costs the node's own start, not the imports. Every process here ends by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from swarm.p2p.transport import Transport

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("delta fetch", "ledger write", "round", "start")
# Columns a resume may legitimately change in a committed row.
MUTABLE = {
    "rounds": {"superseded"},
    "updates": {"superseded"},
    "evals": {"superseded"},
    "group_uses": {"superseded"},
    "peers": {"last_seen", "addrs", "model"},
    "meta": {"value"},
}


# --------------------------------------------------------------------------- a node process


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
    from swarm.node.assembly import node_identity

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

    def served_blobs(self):
        return self.inner.served_blobs()

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


class Launcher:
    def __init__(self, max_lifetime: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--launcher", "--max-lifetime", str(max_lifetime)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        )
        ready = self._read()
        assert ready["ready"] and ready["threads"] == 1, ready  # nothing running to fork mid-way

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the launcher died")
        return json.loads(line)

    def send(self, **command) -> dict:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


# --------------------------------------------------------------------------- the loop


class NodeProc:
    """One node's run folder, config, marks file and current process."""

    def __init__(self, name: str, folder: Path, launcher: Launcher) -> None:
        self.name, self.folder, self.launcher = name, folder, launcher
        self.config, self.marks = folder / "node.toml", folder / "marks"
        self.ledger = folder / "ledger.sqlite"
        self.pid, self.offset = 0, 0

    def start(self) -> None:
        self.offset = self.marks.stat().st_size if self.marks.exists() else 0
        self.started = time.monotonic()
        reply = self.launcher.send(
            cmd="run", config=str(self.config), marks=str(self.marks), log=str(self.folder / "log")
        )
        self.pid = reply["pid"]

    def life(self) -> bytes:
        """The marks of the current process."""
        with open(self.marks, "rb") as f:
            f.seek(self.offset)
            return f.read()

    def wait_for(self, mark: bytes, after: int, timeout: float, times: int = 1) -> bool:
        """Until `mark` appears `times` times in this life's marks past index `after`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.life().count(mark, after) >= times:
                return True
            time.sleep(0.001)
        return False

    def kill(self) -> int:
        os.kill(self.pid, signal.SIGKILL)
        return self.launcher.send(cmd="reap", pid=self.pid)["exit"]

    def stop(self) -> int:
        os.kill(self.pid, signal.SIGTERM)
        return self.launcher.send(cmd="reap", pid=self.pid)["exit"]


def phase_of(marks: bytes) -> str:
    """Which phase the marks of a killed life end in."""
    if marks.rfind(b"F") > marks.rfind(b"f"):
        return "delta fetch"
    if marks.rfind(b"L") > marks.rfind(b"l"):
        return "ledger write"
    return "round" if b"S" in marks else "start"


def snapshot(path: Path) -> dict:
    """Every committed row: (table, rowid) -> {column: value}."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {}
        for table in tables:
            cursor = db.execute(f'SELECT rowid, * FROM "{table}"')
            names = [d[0] for d in cursor.description][1:]
            for rowid, *values in cursor:
                rows[(table, rowid)] = dict(zip(names, values, strict=True))
        return rows
    finally:
        db.close()


def integrity(path: Path) -> str:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


def stable(table: str, row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in MUTABLE.get(table, ())}


def lost(before: dict, after: dict) -> list[str]:
    """Rows of `before` missing or changed in `after` (a superseded row never revives)."""
    out = []
    for key, row in before.items():
        now = after.get(key)
        if now is None or stable(key[0], now) != stable(key[0], row):
            out.append(f"{key} {'gone' if now is None else 'changed'}")
        elif row.get("superseded") and not now.get("superseded"):
            out.append(f"{key} came back to life")
    return out


def duplicated(rows: dict) -> list[str]:
    """What a node recorded twice: live rounds, updates, evaluations or group uses of one
    round, or one group sent or accepted twice (a group's row is its content hash)."""
    out = []
    keys = {
        "rounds": ("round",),
        "updates": ("round",),
        "evals": ("round",),
        "group_uses": ("group_id", "round"),
    }
    for table, fields in keys.items():
        live = [
            tuple(r[f] for f in fields)
            for (t, _), r in rows.items()
            if t == table and not r["superseded"]
        ]
        if len(live) != len(set(live)):
            out.append(f"live {table} repeat a {'/'.join(fields)}")
    rounds = sorted(
        r["round"] for (t, _), r in rows.items() if t == "rounds" and not r["superseded"]
    )
    if rounds != list(range(len(rounds))):
        out.append(f"live rounds are not 0..n-1: ...{rounds[-10:]}")
    groups = [
        (r["content_hash"], r["direction"])
        for (t, _), r in rows.items()
        if t == "rollout_groups" and r["status"] in ("sent", "accepted")
    ]
    if len(groups) != len(set(groups)):
        out.append("a group is recorded as sent or accepted twice")
    return out


def doctor_problems(node: NodeProc) -> list[str]:
    from swarm.ops.doctor import diagnose

    url = f"sqlite:///{node.ledger}"
    return [f.message for f in diagnose(url, node.folder / "checkpoints") if f.level == "problem"]


def kill_once(node: NodeProc, target: str, rng: random.Random, round_s: float) -> dict:
    """Kill `node` in the `target` phase (as nearly as the marks allow), check, restart."""
    before = snapshot(node.ledger)
    mark_at = len(node.life())
    if target == "round":  # a random moment of a round
        node.wait_for(b"r", mark_at, 120)
        time.sleep(rng.uniform(0.0, round_s))
    else:  # as one of the next few fetches or ledger writes begins
        mark = b"F" if target == "delta fetch" else b"L"
        node.wait_for(mark, mark_at, 120, times=rng.randint(1, 4))
    exit_code = node.kill()
    marks = node.life()
    at_death = snapshot(node.ledger)
    check = integrity(node.ledger)
    problems = lost(before, at_death)
    doctor = doctor_problems(node)  # while the node is down: its checkpoints hold still
    node.start()
    resumed = node.wait_for(b"r", 0, 180)
    resume_s = time.monotonic() - node.started
    after = snapshot(node.ledger)
    problems += lost(at_death, after)
    doubled = duplicated(after)
    return {
        "node": node.name,
        "aimed_at": target,
        "phase": phase_of(marks),
        "exit": exit_code,
        "integrity": check,
        "resumed": resumed,
        "resume_s": round(resume_s, 2),
        "rows_at_death": len(at_death),
        "lost": problems,
        "duplicated": doubled,
        "doctor": doctor,
    }


def prepare(out: Path) -> tuple[Path, Path]:
    from swarm.core.identity import create_identity, peer_id_of, save_identity
    from swarm.ops.demo import free_ports

    t_dir, g_dir = out / "trainer", out / "follower"
    keys = {t_dir: create_identity(), g_dir: create_identity()}
    ports = dict(zip((t_dir, g_dir), free_ports(2), strict=True))
    for folder, key in keys.items():
        folder.mkdir(parents=True)
        save_identity(key, folder / "identity.key")
    ids = {folder: peer_id_of(key) for folder, key in keys.items()}
    for folder, other in ((t_dir, g_dir), (g_dir, t_dir)):
        role = (
            ['role = "generator"', "[sync]", f'follow = "{ids[t_dir]}"']
            if folder == g_dir
            else [
                'role = "trainer"',
                "[sync]",
                "publish_deltas = true",
                "anchor_every = 4",
                "keep_deltas = 8",
            ]
        )
        (folder / "node.toml").write_text(
            "\n".join(
                [
                    "[p2p]",
                    f'listen = "/ip4/127.0.0.1/tcp/{ports[folder]}"',
                    f'bootstrap = ["/ip4/127.0.0.1/tcp/{ports[other]}/p2p/{ids[other]}"]',
                    "[policy]",
                    'device = "cpu"',
                    'dtype = "float32"',
                    "[generation]",
                    "questions_per_round = 2",
                    "completions_per_question = 4",
                    "max_new_tokens = 6",
                    "[training]",
                    "local_groups = 2",
                    "[tasks]",
                    "eval_size = 4",
                    "eval_every = 100000",
                    "[node]",
                    f'name = "{folder.name}"',
                    f'run_dir = "{folder}"',
                    "rounds = 0",
                    "checkpoint_every = 1",
                    "keep_checkpoints = 2",
                    *role,
                ]
            )
            + "\n"
        )
    return t_dir, g_dir


def run(kills: int, seed: int, out: Path) -> dict:
    rng = random.Random(seed)
    t_dir, g_dir = prepare(out)
    launcher = Launcher(max_lifetime=60 + kills * 40)
    nodes = {
        "trainer": NodeProc("trainer", t_dir, launcher),
        "follower": NodeProc("follower", g_dir, launcher),
    }
    records, started = [], time.monotonic()
    try:
        for node in nodes.values():
            node.start()
        for node in nodes.values():
            if not node.wait_for(b"r", 0, 300):
                raise RuntimeError(f"the {node.name} ran no round; see {node.folder / 'log'}")
        round_s = 1.0
        for i in range(kills):
            target = ("delta fetch", "ledger write", "round")[i % 3]
            name = "follower" if target == "delta fetch" or i % 2 else "trainer"
            record = kill_once(nodes[name], target, rng, round_s)
            records.append(record)
            print(
                f"kill {i + 1:3d}: {name:8s} aimed at {target:12s} hit {record['phase']:12s} "
                f"integrity {record['integrity']}, resumed in {record['resume_s']:.1f} s",
                flush=True,
            )
        finals = {name: node.stop() for name, node in nodes.items()}
    finally:
        for node in nodes.values():
            if node.pid and _alive(node.pid):
                node.kill()
        launcher.close()
    wall = time.monotonic() - started
    final_checks = {
        name: {
            "exit": finals[name],
            "integrity": integrity(node.ledger),
            "duplicated": duplicated(snapshot(node.ledger)),
            "doctor": doctor_problems(node),
        }
        for name, node in nodes.items()
    }
    return {
        "kills": records,
        "final": final_checks,
        "wall_s": round(wall, 1),
        "seed": seed,
        "command": " ".join(["python", "scripts/kill_loop.py", *sys.argv[1:]]),
        "summary": summarize(records, final_checks),
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def summarize(records: list[dict], finals: dict) -> dict:
    by_phase = {p: [r for r in records if r["phase"] == p] for p in PHASES}
    bad = [
        r
        for r in records
        if r["exit"] != -signal.SIGKILL
        or r["integrity"] != "ok"
        or not r["resumed"]
        or r["lost"]
        or r["duplicated"]
        or r["doctor"]
    ]
    final_ok = all(
        f["exit"] == 0 and f["integrity"] == "ok" and not f["duplicated"] and not f["doctor"]
        for f in finals.values()
    )
    resume = [r["resume_s"] for r in records if r["resumed"]]
    return {
        "kills": len(records),
        "by_phase": {p: len(rs) for p, rs in by_phase.items()},
        "by_node": {n: sum(r["node"] == n for r in records) for n in ("trainer", "follower")},
        "integrity_ok": sum(r["integrity"] == "ok" for r in records),
        "resumed": sum(r["resumed"] for r in records),
        "rows_lost": sum(len(r["lost"]) for r in records),
        "rows_duplicated": sum(len(r["duplicated"]) for r in records),
        "doctor_problems": sum(len(r["doctor"]) for r in records),
        "resume_median_s": statistics.median(resume) if resume else None,
        "resume_max_s": max(resume) if resume else None,
        "failures": len(bad),
        "final_ok": final_ok,
        "ok": not bad and final_ok and len(records) > 0,
    }


def table(result: dict) -> str:
    s, recs = result["summary"], result["kills"]
    lines = [
        f"kill -9 loop: {s['kills']} kills in {result['wall_s']:.0f} s "
        f"(trainer {s['by_node']['trainer']}, follower {s['by_node']['follower']}), "
        f"seed {result['seed']}",
        f"{'phase hit':<14}{'kills':>6}{'integrity ok':>14}{'resumed':>9}{'rows lost':>11}"
        f"{'duplicated':>12}",
    ]
    for phase in PHASES:
        rs = [r for r in recs if r["phase"] == phase]
        lines.append(
            f"{phase:<14}{len(rs):>6}{sum(r['integrity'] == 'ok' for r in rs):>14}"
            f"{sum(r['resumed'] for r in rs):>9}{sum(len(r['lost']) for r in rs):>11}"
            f"{sum(len(r['duplicated']) for r in rs):>12}"
        )
    lines.append(
        f"{'total':<14}{s['kills']:>6}{s['integrity_ok']:>14}{s['resumed']:>9}"
        f"{s['rows_lost']:>11}{s['rows_duplicated']:>12}"
    )
    if s["resume_median_s"] is not None:
        lines.append(
            f"restart to the first new round: median {s['resume_median_s']:.1f} s, "
            f"max {s['resume_max_s']:.1f} s"
        )
    lines.append(
        f"clean stop at the end: {'ok' if s['final_ok'] else 'FAILED'}; "
        f"verdict: {'ok' if s['ok'] else 'FAILED'}"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20250611)
    parser.add_argument("--json", default=str(ROOT / "runs" / "kill_loop.json"))
    parser.add_argument("--work", default=None, help="folder for the run folders (default: temp)")
    parser.add_argument("--launcher", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--max-lifetime", type=float, default=3600.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.launcher:
        launcher(args.max_lifetime)
        return 0
    with tempfile.TemporaryDirectory(prefix="kill-loop-") as tmp:
        result = run(args.kills, args.seed, Path(args.work or tmp))
    print(table(result))
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return 0 if result["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
