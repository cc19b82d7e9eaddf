"""The verification worker: peers' groups re-scored in a child process within a deadline and a
memory limit (swarm.verify.rescore_pool, swarm.verify.rescore_worker)."""

from __future__ import annotations

import os
import threading
import time

import msgspec
import pytest

from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.tasks import TaskSpec, build_task
from swarm.verify.rescore_pool import InProcess, RescoreWorker, WorkerSettings
from swarm.wire import RolloutGroup, Sampling

SENDER = peer_id_of(create_identity(b"\x41" * 32))


def group(dataset: str, completions: tuple[str, ...], index: int = 2) -> RolloutGroup:
    spec = TaskSpec.make(dataset, {}, seed=1, index=index)
    n = len(completions)
    return RolloutGroup(
        swarm_id="swarm-local",
        sender=SENDER,
        task=spec,
        question=build_task(spec).question,
        completions=completions,
        rewards=(0.0,) * n,
        finished=(True,) * n,
        model="m",
        base_hash="00" * 16,
        policy_version=0,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=0,
        created_at=0.0,
        nonce=b"\x00" * 16,
    )


@pytest.fixture
def worker():
    w = RescoreWorker(WorkerSettings(deadline_s=1.0, grace_s=1.0))
    w.start()
    yield w
    w.close()


def test_the_worker_scores_as_this_process_does(worker):
    task = build_task(TaskSpec.make("basic_arithmetic", {}, seed=1, index=2))
    honest = group(
        "basic_arithmetic", (f"<answer>{task.answer}</answer>", "<answer>0</answer>", task.answer)
    )
    mine = InProcess()(honest).result()
    theirs = worker(honest)
    assert theirs.error is None and theirs.seconds > 0
    got = theirs.result()
    assert got.task.question == mine.task.question and got.task.answer == mine.task.answer
    assert (got.correctness, got.tagged, got.well_formatted) == (
        mine.correctness,
        mine.tagged,
        mine.well_formatted,
    )


def test_a_bad_spec_is_rejected_by_the_worker(worker):
    bad = msgspec.structs.replace(
        group("basic_arithmetic", ("1",)), task=TaskSpec.make("no_such_dataset", {}, 0, 0)
    )
    assert worker(bad).error.reason == Reason.BAD_TASK
    wrong_question = msgspec.structs.replace(group("basic_arithmetic", ("1",)), question="What?")
    assert worker(wrong_question).error.reason == Reason.QUESTION_MISMATCH
    assert worker.stats.restarts == 0


def test_a_group_past_its_deadline_is_rejected_and_the_worker_replaced(worker):
    pid = worker(group("basic_arithmetic", ("1",))).seconds and worker.pid
    slow = group("countdown", ("<answer>9**9**8</answer>",))  # sympy computes 9**43046721
    attempt = worker(slow)
    assert attempt.error.reason == Reason.VERIFY_TIMEOUT
    assert 1.0 <= attempt.seconds < 6.0
    # the next group is answered (by the same worker if Python code was interrupted, else by
    # a fresh one started at once)
    assert worker(group("basic_arithmetic", ("1",))).error is None
    assert worker.stats.timeouts == 1 and (worker.pid == pid) == (worker.stats.restarts == 0)


def test_a_group_needing_too_much_memory_is_rejected_and_the_worker_restarted():
    worker = RescoreWorker(WorkerSettings(deadline_s=30.0, memory_mb=512, cache_mb=16))
    try:
        pid = worker(group("basic_arithmetic", ("1",))).seconds and worker.pid
        big = group("countdown", ("<answer>2**2**30</answer>",))  # a 128 MB integer, squared
        attempt = worker(big)
        assert attempt.error.reason == Reason.VERIFY_MEMORY
        assert worker.stats.memory == 1 and worker.stats.restarts == 1 and worker.pid != pid
        assert worker(group("basic_arithmetic", ("1",))).error is None
    finally:
        worker.close()


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].startswith("Z")  # exited, not yet reaped
    except OSError:
        return True


def test_a_worker_that_died_between_groups_is_replaced_and_blames_nobody(worker):
    assert worker(group("basic_arithmetic", ("1",))).error is None
    pid = worker.pid
    os.kill(pid, 9)
    deadline = time.monotonic() + 10
    while not _dead(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker(group("basic_arithmetic", ("1",))).error is None  # answered by a fresh one
    assert worker.pid != pid and worker.stats.crashes == 0 and worker.stats.restarts == 1


def test_a_worker_that_died_on_a_group_blames_that_group(worker):
    """It had said it took the group (the `Received` frame), so the group is the suspect."""
    assert worker(group("basic_arithmetic", ("1",))).error is None
    pid = worker.pid
    slow = group("countdown", ("<answer>9**9**8</answer>",))  # busy until its deadline
    killer = threading.Timer(0.3, os.kill, (pid, 9))
    killer.start()
    attempt = worker(slow)
    killer.join()
    assert attempt.error.reason == Reason.VERIFY_CRASHED and attempt.seconds < 1.0
    assert worker.stats.crashes == 1 and worker.pid != pid
    assert worker(group("basic_arithmetic", ("1",))).error is None


def test_the_worker_outlives_the_thread_that_started_it():
    worker = RescoreWorker(WorkerSettings())
    try:
        first = []
        starter = threading.Thread(
            target=lambda: first.append(worker(group("basic_arithmetic", ("1",))))
        )
        starter.start()  # starts the worker and has it answer once, then ends
        starter.join()
        pid = worker.pid
        time.sleep(1.0)  # a worker tied to the starting thread would be killed by now
        assert first[0].error is None
        assert worker(group("basic_arithmetic", ("1",))).error is None and worker.pid == pid
    finally:
        worker.close()


def test_a_closed_worker_leaves_no_process(worker):
    worker(group("basic_arithmetic", ("1",)))
    pid = worker.pid
    worker.close()
    assert worker.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
