"""kill -9 loop: a trainer and a follower on 127.0.0.1, one of them killed at random moments.

What it measures, on what and how, is said once: in `scripts/kill_loop.py`'s help.
`run` takes the options of `scripts/kill_loop.py` (kills, seed, json, work); the node
processes are `lab.kill_node`'s, the checks `lab.kill_checks`'.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab.kill_checks import PHASES, duplicated, integrity, lost, phase_of, snapshot

ROOT = Path(__file__).resolve().parents[1]


class Launcher:
    """The launcher process (`lab.kill_node`) and its command channel."""

    def __init__(self, max_lifetime: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lab.kill_node", "--max-lifetime", str(max_lifetime)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both piped
        self._in, self._out = self.proc.stdin, self.proc.stdout
        ready = self._read()
        assert ready["ready"] and ready["threads"] == 1, ready  # nothing running to fork mid-way

    def _read(self) -> dict:
        line = self._out.readline()
        if not line:
            raise RuntimeError("the launcher died")
        return json.loads(line)

    def send(self, **command) -> dict:
        self._in.write(json.dumps(command) + "\n")
        self._in.flush()
        return self._read()

    def close(self) -> None:
        self._in.close()
        self.proc.wait(timeout=30)


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


def doctor_problems(node: NodeProc) -> list[str]:
    """What `swarm-node doctor` finds wrong with the node's folder."""
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
                    "own_groups = 2",
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


def kill_loop(kills: int, seed: int, out: Path) -> dict:
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


def run(args) -> int:
    """The loop, its table and its JSON: 0 when every check held, else 1."""
    with tempfile.TemporaryDirectory(prefix="kill-loop-") as tmp:
        result = kill_loop(args.kills, args.seed, Path(args.work or tmp))
    print(table(result))
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return 0 if result["summary"]["ok"] else 1
