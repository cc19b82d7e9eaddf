"""node.log: the node's events with time and level, rotated; a process's library noise goes
there (at WARNING and up), not to the terminal."""

from __future__ import annotations

import json
import logging
import warnings

from swarm.monitor.display import RoundReport
from swarm.monitor.logs import LOG_FILE, LogReporter, NodeLog


def _report(r: int) -> RoundReport:
    return RoundReport(
        round=r,
        policy_version=r + 1,
        mean_reward=0.5,
        accuracy=0.25,
        groups=4,
        trained_groups=4,
        shared_groups=0,
        skipped=False,
        loss=0.1,
        generate_s=1.0,
        train_s=2.0,
        total_s=3.5,
        tokens_generated=40,
        score_s=0.25,
    )


def test_text_lines_carry_time_level_and_the_round(tmp_path):
    log = NodeLog(tmp_path)
    LogReporter(log).round(_report(3))
    log.close()
    (line,) = (tmp_path / LOG_FILE).read_text().splitlines()
    date, clock, level, logger, *rest = line.split()
    assert len(date) == 10 and clock.count(":") == 2 and level == "INFO"
    assert logger == "swarm.node:" and " ".join(rest).startswith("round 3 v4 reward 0.500")


def test_json_lines_carry_the_report(tmp_path):
    log = NodeLog(tmp_path, fmt="json")
    reporter = LogReporter(log)
    reporter.round(_report(0))
    reporter.message("banned 12D3KooW...: forged rewards")
    log.close()
    first, second = (json.loads(x) for x in (tmp_path / LOG_FILE).read_text().splitlines())
    assert (
        first["level"] == "INFO" and first["event"] == "round" and first["time"].endswith("+00:00")
    )
    assert first["data"]["score_s"] == 0.25 and first["data"]["round"] == 0
    assert second["message"] == "banned 12D3KooW...: forged rewards"


def test_library_noise_goes_to_the_file_not_the_terminal(tmp_path, capfd):
    import huggingface_hub.file_download  # noqa: F401  (adds its terminal handler)

    hub_handlers = list(logging.getLogger("huggingface_hub").handlers)
    log = NodeLog(tmp_path)
    log.capture_process(transformers=False)
    try:
        logging.getLogger("libp2p.pubsub").warning("stream reset by peer")
        logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
        logging.getLogger("libp2p.pubsub").info("heartbeat chatter")  # below WARNING: dropped
        logging.getLogger("swarm.p2p.swarm_key").warning("old key format")  # ours: both
        logging.getLogger("swarm.node.something").info("our own info")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a library's deprecation", FutureWarning, stacklevel=1)
    finally:
        log.close()
    terminal = capfd.readouterr()
    text = (tmp_path / LOG_FILE).read_text()
    assert "stream reset by peer" in text and "heartbeat chatter" not in text
    assert "WARNING libp2p.pubsub: stream reset by peer" in text
    assert "old key format" in text and "our own info" in text
    assert "a library's deprecation" in text
    assert "stream reset" not in terminal.err + terminal.out
    assert "Retrying in 1s" in text and "Retrying" not in terminal.err + terminal.out
    assert "deprecation" not in terminal.err + terminal.out
    assert "old key format" in terminal.err  # swarm's own warnings still reach stderr
    # closed: the process's logging is as it was
    assert log.handler not in logging.getLogger().handlers
    assert hub_handlers and logging.getLogger("huggingface_hub").handlers == hub_handlers


def test_the_log_is_rotated(tmp_path):
    log = NodeLog(tmp_path, max_mb=1, backups=2)
    reporter = LogReporter(log)
    for i in range(5000):
        reporter.message(f"message {i} " + "x" * 400)
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["node.log", "node.log.1", "node.log.2"]
    assert all(p.stat().st_size <= 1024 * 1024 for p in tmp_path.iterdir())
    assert "message 4999 " in (tmp_path / LOG_FILE).read_text()
