"""The progress display renders rounds, evaluations and a reward sparkline."""

import dataclasses
import io
import re

from rich.console import Console

from swarm.monitor.display import (
    EvalReport,
    LineReporter,
    LiveReporter,
    RoundReport,
    RunInfo,
    header_lines,
    round_line,
    sparkline,
)


def _report(i, reward):
    return RoundReport(
        round=i,
        policy_version=i + 1,
        mean_reward=reward,
        accuracy=reward / 2,
        groups=8,
        trained_groups=6,
        shared_groups=0,
        skipped=False,
        loss=0.01,
        generate_s=0.5,
        train_s=0.4,
        total_s=1.0,
        tokens_generated=100,
    )


def _info():
    return RunInfo(
        name="n",
        model="swarm-tiny",
        device="cpu",
        run_dir="runs/n",
        peer_id="p",
        start_round=0,
        target_rounds=3,
    )


def test_sparkline_scales_between_min_and_max():
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert sparkline([]) == "" and len(sparkline([1.0] * 100, width=40)) == 40


def test_live_reporter_shows_rounds_and_accuracy():
    out = io.StringIO()
    reporter = LiveReporter(Console(file=out, force_terminal=True, width=140))
    reporter.start(_info())
    for i, reward in enumerate((0.0, 0.5, 1.0)):
        reporter.round(_report(i, reward))
    reporter.evaluation(EvalReport(round=0, policy_version=0, accuracy=0.3, questions=50))
    reporter.evaluation(EvalReport(round=3, policy_version=3, accuracy=0.5, questions=50))
    reporter.stop()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())  # drop colours and cursor moves
    assert "reward per round" in text and "▁▅█" in text
    assert "30.0% at v0 -> 50.0% at v3" in text and "1.000" in text


def test_line_reporter_prints_one_line_per_round():
    out = io.StringIO()
    reporter = LineReporter(out)
    reporter.start(_info())
    reporter.round(_report(0, 0.25))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("node n (p) model swarm-tiny on cpu")
    assert "round     0  v1     reward 0.250" in lines[1]


def test_the_start_line_names_the_metrics_url_when_served():
    served = dataclasses.replace(_info(), metrics_url="http://127.0.0.1:41234/metrics")
    assert header_lines(served)[0].endswith("; metrics at http://127.0.0.1:41234/metrics")
    assert "metrics" not in header_lines(_info())[0]


def test_the_round_line_shows_what_the_transport_refused():
    base = dataclasses.replace(_report(3, 0.5), peers=2, received=8, accepted=6, rejected=2)
    assert "refused" not in round_line(base)
    line = round_line(dataclasses.replace(base, refused=5))
    assert line.endswith("peers 2 recv 8 ok 6 rej 2 refused 5"), line
    alone = dataclasses.replace(_report(3, 0.5), refused=1)  # nothing received, only refused
    assert round_line(alone).endswith("refused 1")
