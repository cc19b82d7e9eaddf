"""What floods cost a real node: its round time against its own baseline, its RSS and its
ledger growth, per attack class, with the attacker's process at nice 19.

    python scripts/bench_flood.py [--classes duplicates,garbage,ihave,bulk,hints] [--seconds 25]
                                  [--repeats 2] [--out results/flood/bench.json]

The victim is `swarm-node join` in its own process (defaults but light rounds of 4 questions
of 4 completions of 8 tokens, the tiny model on the CPU, the gossip exchange so that every
group reaches it, no evaluation), alone in its swarm. For
each class and repeat the bench measures a baseline window (no attacker) and then an attack
window of `--seconds` each, alternating, so a machine whose load drifts affects both alike.
The attacker is this script in attack mode (`--attack CLASS --target ADDR`), a separate
process under `nice -n 19` with a fresh identity each time (a banned one stays banned):

- duplicates: one valid signed group published again and again (each a new gossip message);
- garbage: signed gossip messages of 256 KB of random bytes;
- ihave: RPCs of 2,000 IHAVE entries under made-up topics, written on a raw stream;
- bulk: valid, distinct groups of large completions with honest rewards (accepted);
- hints: a trainer announcing 1 GiB as its holder hints to a follower. This one measures the
  follower's step itself (a process reading the hints every 0.2 s; each read's time and the
  process's RSS) against the same trainer serving 3 KB of honest hints, not a node's rounds.

A window's round time is the median of the victim's rounds that started in it (its ledger);
RSS is the victim's peak in the window minus its RSS at the window's start; ledger growth is
its pages in use at the end minus the start. Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ("duplicates", "garbage", "ihave", "bulk")
GOAL_RATIO = 1.5
GOAL_MB = 50.0


# ------------------------------------------------------------------------------ attacker


def _group(key, peer_id: str, index: int, text_chars: int):
    """A valid group of the victim's own task mix, with honest rewards."""
    import msgspec

    from swarm.tasks import EASY_MIX, TaskSpec, build_task
    from swarm.verify.rescore import rescore
    from swarm.wire import RolloutGroup, Sampling, new_nonce

    entry = EASY_MIX[0]
    spec = TaskSpec.make(entry.dataset, entry.config, seed=7, index=index)
    completions = tuple(f"{'x' * text_chars}<answer>{i}</answer>" for i in range(8))
    group = RolloutGroup(
        swarm_id="swarm-local",
        sender=peer_id,
        task=spec,
        question=build_task(spec).question,
        completions=completions,
        rewards=(0.0,) * 8,
        finished=(True,) * 8,
        model="swarm-tiny",
        base_hash="00" * 16,
        policy_version=0,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=index,
        created_at=time.time(),
        nonce=new_nonce(),
        format_bonus=0.1,
    )
    return msgspec.structs.replace(group, rewards=rescore(group, 0.1)[1])


def attack(kind: str, target: str, seconds: float) -> dict:
    """Run one attack on `target` for `seconds`; what was sent."""
    from libp2p.pubsub.pb import rpc_pb2

    from swarm.core.identity import create_identity, peer_id_of
    from swarm.p2p.libp2p import Libp2pTransport
    from swarm.p2p.libp2p.testing import rpc_frame
    from swarm.wire import pack_messages, rollout_topic
    from swarm.wire.signing import sign_group

    topic = rollout_topic("swarm-local")
    key = create_identity()
    me = peer_id_of(key)
    transport = Libp2pTransport(
        key_pair=key, bootstrap=[target], topics=[topic], peer_exchange=False
    )
    transport.start()
    sent = nbytes = 0
    try:
        transport.wait_for_topic_peers(topic, 1, timeout=60)
        victim = target.rsplit("/p2p/", 1)[1]
        print(json.dumps({"event": "ready"}), flush=True)  # the window starts now
        deadline = time.monotonic() + seconds
        if kind == "duplicates":
            message = pack_messages([sign_group(_group(key, me, 1, 16), key)])[0]
        stream = None
        while time.monotonic() < deadline:
            try:
                if kind == "duplicates":
                    data = message
                    transport.publish(topic, data)
                elif kind == "garbage":
                    data = os.urandom(256 * 1024)
                    transport.publish(topic, data)
                elif kind == "bulk":
                    data = pack_messages([sign_group(_group(key, me, sent, 20_000), key)])[0]
                    transport.publish(topic, data)
                elif kind == "ihave":
                    if stream is None:
                        stream = transport.open_raw_stream(victim, "/meshsub/1.1.0")
                    ids = [os.urandom(46) for _ in range(4)]
                    entries = [
                        rpc_pb2.ControlIHave(topicID=f"nowhere-{sent}-{i}", messageIDs=ids)
                        for i in range(2000)
                    ]
                    data = rpc_frame(rpc_pb2.RPC(control=rpc_pb2.ControlMessage(ihave=entries)))
                    stream.write(data, timeout=5.0)
                else:
                    raise ValueError(kind)
            except Exception as e:  # noqa: BLE001 - the victim hung up on us: try again
                stream = None
                time.sleep(0.2)
                if time.monotonic() >= deadline:
                    break
                print(f"attacker: {type(e).__name__}: {e}"[:200], file=sys.stderr)
                continue
            sent += 1
            nbytes += len(data)
        transport.flush(timeout=2.0)
    finally:
        transport.close()
    return {"peer_id": me, "sent": sent, "bytes": nbytes}


# ------------------------------------------------------------------------------ hints


HINTS_BASE = "ab" * 32


def follow_hints(target: str, seconds: float) -> dict:
    """A follower's step that reads its trainer's holder hints, again and again for
    `seconds`: each read's time, and this process's RSS growth."""
    from swarm.p2p.libp2p import Libp2pTransport
    from swarm.sync.holders import read_hints

    transport = Libp2pTransport(bootstrap=[target], peer_exchange=False)
    transport.start()
    provider = target.rsplit("/p2p/", 1)[1]
    times, hints = [], 0
    try:
        time.sleep(1.0)
        rss0 = peak = rss_mb(os.getpid())
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            began = time.perf_counter()
            hints = len(read_hints(transport, provider, HINTS_BASE, timeout=30.0))
            times.append(time.perf_counter() - began)
            peak = max(peak, rss_mb(os.getpid()))
            time.sleep(0.2)
    finally:
        transport.close()
    return {
        "reads": len(times),
        "median_s": round(statistics.median(times), 4) if times else None,
        "max_s": round(max(times), 3) if times else None,
        "rss_growth_mb": round(peak - rss0, 1),
        "hints": hints,
    }


def hints_window(tmp: Path, seconds: float, lie: bool) -> dict:
    """A trainer (tests/adversary/hostile_trainer.py, at nice 19) serving honest hints of
    3 KB, or announcing 1 GiB as its hints; a follower process reading them."""
    from swarm.sync.holders import encode_hints
    from swarm.wire import HolderHint, holders_key

    honest = tmp / "hints.bin"
    honest.write_bytes(
        encode_hints(
            [
                HolderHint(f"{i:064x}", "12D3KooW" + "x" * 44, ("/ip4/10.0.0.1/tcp/4001",))
                for i in range(24)
            ]
        )
    )
    how = {"mode": "lie", "announce": 1 << 30} if lie else {"mode": "serve", "file": str(honest)}
    plan = tmp / "plan.json"
    plan.write_text(json.dumps({holders_key(HINTS_BASE): how}))
    trainer_cmd = ["nice", "-n", "19", sys.executable, "-m", "tests.adversary.hostile_trainer"]
    trainer_cmd += ["--seed", os.urandom(32).hex(), "--plan", str(plan)]
    trainer_cmd += ["--max-lifetime", str(int(seconds + 60))]
    trainer = subprocess.Popen(
        trainer_cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert trainer.stdin is not None and trainer.stdout is not None
    try:
        ready = json.loads(trainer.stdout.readline())
        cmd = [sys.executable, __file__, "--follow-hints", "--target", ready["addrs"][0]]
        cmd += ["--seconds", str(seconds)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {"error": out.stderr[-500:]}
        assert trainer.stdin is not None and trainer.stdout is not None
        trainer.stdin.write(json.dumps({"cmd": "sent"}) + "\n")
        trainer.stdin.flush()
        result["trainer_sent_bytes"] = sum(json.loads(trainer.stdout.readline())["sent"].values())
    finally:
        trainer.stdin.close()
        trainer.wait(timeout=30)
    return result


def bench_hints(seconds: float, repeats: int) -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            base = hints_window(Path(tmp), seconds, lie=False)
            hit = hints_window(Path(tmp), seconds, lie=True)
            runs.append({"baseline": base, "attack": hit})
            print(f"hints {r + 1}/{repeats}: {json.dumps(hit)}", flush=True)
    return {"runs": runs}


# ------------------------------------------------------------------------------ victim


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Victim:
    """`swarm-node join` in its own process, alone in its swarm."""

    def __init__(self, run_dir: Path, model: str):
        self.run_dir = run_dir
        sets = [
            f"policy.model={model}",
            "p2p.exchange=gossip",
            "tasks.eval_size=0",
            "node.checkpoint_every=1000",
            "policy.device=cpu",
            # Light rounds, so that a window of seconds holds many of them on a busy machine
            # (and a flood's cost shows against a short round, not hidden in a long one).
            "generation.questions_per_round=4",
            "generation.completions_per_question=4",
            "generation.max_new_tokens=8",
            "training.local_groups=4",
        ]
        cmd = [str(Path(sys.executable).parent / "swarm-node"), "join", "--run-dir", str(run_dir)]
        cmd += ["--listen", "/ip4/127.0.0.1/tcp/0"]
        for s in sets:
            cmd += ["--set", s]
        self.log = open(run_dir.parent / "victim.out", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        info_path = run_dir / "node.json"
        deadline = time.monotonic() + 300
        while not info_path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the victim did not start (see {run_dir.parent / 'victim.out'})")
            time.sleep(0.5)
        time.sleep(0.5)
        info = json.loads(info_path.read_text())
        self.addr = info["addrs"][0]
        self.pid = self.proc.pid

    def rounds(self, since: float, until: float) -> list[float]:
        from swarm.ledger import Ledger, RoundRow

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            with ledger.reader() as s:
                rows = s.query(RoundRow).filter(
                    RoundRow.started_at >= since, RoundRow.started_at < until
                )
                return [r.total_s for r in rows if not r.superseded]
        finally:
            ledger.close()

    def ledger_mb(self) -> float:
        from swarm.ledger import Ledger
        from swarm.ledger.retention import used_bytes

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            return (used_bytes(ledger) or 0) / 1e6
        finally:
            ledger.close()

    def handled(self, peer: str) -> dict[str, int]:
        """What the victim's ledger holds of `peer`'s messages: rows by outcome, counts."""
        from swarm.ledger import GroupRow, Ledger, counted_rejections

        ledger = Ledger(f"sqlite:///{self.run_dir / 'ledger.sqlite'}", create=False)
        try:
            with ledger.reader() as s:
                out: dict[str, int] = dict(counted_rejections(s, peer))
                for row in s.query(GroupRow).filter(GroupRow.source == peer):
                    key = row.reason or row.status
                    out[key] = out.get(key, 0) + 1
                return out
        finally:
            ledger.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def window(victim: Victim, seconds: float, kind: str | None) -> dict:
    """One window: the victim's rounds, RSS and ledger, with `kind` attacking or none. An
    attack window starts once the attacker (slow to start at nice 19) is meshed."""
    attacker = None
    if kind is not None:
        cmd = ["nice", "-n", "19", sys.executable, __file__, "--attack", kind]
        cmd += ["--target", victim.addr, "--seconds", str(seconds)]
        attacker = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert attacker.stdout is not None
        attacker.stdout.readline()  # {"event": "ready"}, or "" if it failed
    began = time.time()
    rss0, ledger0 = rss_mb(victim.pid), victim.ledger_mb()
    peak = [rss0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak[0] = max(peak[0], rss_mb(victim.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sent: dict = {}
    if attacker is None:
        time.sleep(seconds)
    else:
        assert attacker.stdout is not None
        lines = [line for line in attacker.stdout if line.startswith("{")]
        attacker.wait(timeout=120)
        sent = json.loads(lines[-1]) if lines else {"error": f"exit {attacker.returncode}"}
    ended = time.time()
    time.sleep(1.0)  # the round running at the end is recorded once it finishes
    stop.set()
    sampler.join()
    rounds = victim.rounds(began, ended)
    return {
        "attack": kind,
        "seconds": round(ended - began, 1),
        "rounds": len(rounds),
        "median_round_s": round(statistics.median(rounds), 3) if rounds else None,
        "max_round_s": round(max(rounds), 3) if rounds else None,
        "rss_growth_mb": round(peak[0] - rss0, 1),
        "ledger_growth_mb": round(victim.ledger_mb() - ledger0, 2),
        "sent": sent,
        "victim_recorded": victim.handled(sent["peer_id"]) if "peer_id" in sent else {},
    }


def bench(classes: list[str], seconds: float, repeats: int, model: str) -> dict:
    results: dict = {"classes": {}, "seconds": seconds, "repeats": repeats, "model": model}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "victim"
        run_dir.mkdir()
        victim = Victim(run_dir, model)
        try:
            window(victim, 15.0, None)  # warm-up: model, worker, first rounds
            for kind in classes:
                runs = []
                for r in range(repeats):
                    base = window(victim, seconds, None)
                    hit = window(victim, seconds, kind)
                    runs.append({"baseline": base, "attack": hit})
                    print(f"{kind} {r + 1}/{repeats}: {json.dumps(hit)}", flush=True)
                results["classes"][kind] = summarise(runs)
        finally:
            victim.stop()
    return results


def summarise(runs: list[dict]) -> dict:
    ratios = [
        run["attack"]["median_round_s"] / run["baseline"]["median_round_s"]
        for run in runs
        if run["attack"]["median_round_s"] and run["baseline"]["median_round_s"]
    ]
    worst = max(ratios) if ratios else None
    rss = max(run["attack"]["rss_growth_mb"] for run in runs)
    ledger = max(run["attack"]["ledger_growth_mb"] for run in runs)
    return {
        "runs": runs,
        "ratios": [round(x, 2) for x in ratios],
        "worst_ratio": round(worst, 2) if worst else None,
        "worst_rss_growth_mb": rss,
        "worst_ledger_growth_mb": ledger,
        "meets_goal": worst is not None
        and worst <= GOAL_RATIO
        and rss <= GOAL_MB
        and ledger <= GOAL_MB,
    }


def table(results: dict) -> str:
    lines = [
        f"{'class':<11} {'baseline s':>10} {'attack s':>9} {'ratio':>6} {'RSS MB':>7} "
        f"{'ledger MB':>9} {'sent':>7}  goal"
    ]
    for kind, r in results["classes"].items():
        for run in r["runs"]:
            b, a = run["baseline"], run["attack"]
            ratio = (
                a["median_round_s"] / b["median_round_s"]
                if a["median_round_s"] and b["median_round_s"]
                else float("nan")
            )
            lines.append(
                f"{kind:<11} {b['median_round_s'] or 0:>10.2f} {a['median_round_s'] or 0:>9.2f} "
                f"{ratio:>6.2f} {a['rss_growth_mb']:>7.1f} {a['ledger_growth_mb']:>9.2f} "
                f"{a['sent'].get('sent', 0):>7}  {'met' if r['meets_goal'] else 'MISSED'}"
            )
    for run in results.get("hints", {}).get("runs", []):
        b, a = run["baseline"], run["attack"]
        lines.append(
            f"{'hints':<11} {b['median_s'] or 0:>10.3f} {a['median_s'] or 0:>9.3f} "
            f"{(a['median_s'] or 0) / (b['median_s'] or 1):>6.2f} {a['rss_growth_mb']:>7.1f} "
            f"{'-':>9} {a['reads']:>7}  (one hints read, s; trainer sent {a.get('trainer_sent_bytes', 0):,} B)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="swarm-tiny", help="the victim's policy.model")
    parser.add_argument("--out", default=str(ROOT / "results" / "flood" / "bench.json"))
    parser.add_argument("--attack", choices=CLASSES, help=argparse.SUPPRESS)
    parser.add_argument("--follow-hints", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.attack:
        print(json.dumps(attack(args.attack, args.target, args.seconds)), flush=True)
        return 0
    if args.follow_hints:
        print(json.dumps(follow_hints(args.target, args.seconds)), flush=True)
        return 0
    classes = [c for c in args.classes.split(",") if c]
    unknown = sorted(set(classes) - {*CLASSES, "hints"})
    if unknown:
        print(f"unknown classes {unknown}; known: {', '.join(CLASSES)}, hints", file=sys.stderr)
        return 2
    node_classes = [c for c in classes if c != "hints"]
    results = (
        bench(node_classes, args.seconds, args.repeats, args.model)
        if node_classes
        else {"classes": {}}
    )
    if "hints" in classes:
        results["hints"] = bench_hints(args.seconds, args.repeats)
    print(table(results))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
