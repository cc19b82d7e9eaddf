"""The decode-scaling benchmark (`scripts/bench_decode_scaling.py`) at a toy size: every arm
measured for every size, the table, the JSON and the PNG written, and the goal judged."""

import json
from argparse import Namespace

from lab.decode_scaling import ARMS, goal, run, table


def _row(arm, n, ms):
    return {
        "arm": arm,
        "sequences": n,
        "decode_cpu_ms_per_token": ms,
        "decode_wall_ms_per_token": ms,
    }


def test_a_toy_run_writes_its_json_and_curve(tmp_path):
    out = tmp_path / "scaling.json"
    args = Namespace(sizes=[1, 2], arms=list(ARMS), prompt=8, new=3, threads=1, out=str(out))
    result = run(args)
    saved = json.loads(out.read_text())
    assert saved["rows"] == result["rows"]
    assert {(r["arm"], r["sequences"]) for r in saved["rows"]} == {
        (a, n) for a in ARMS for n in (1, 2)
    }
    assert all(r["tokens"] == 3 * r["sequences"] for r in saved["rows"])  # no stop token
    assert out.with_suffix(".png").stat().st_size > 0
    assert saved["goal"] == {}  # 8 and 256 not measured: not judged
    assert len(table(saved["rows"]).splitlines()) == 4


def test_the_goal_is_the_continuous_arms_spread_and_growth_from_8_to_256():
    flat = [_row("continuous", n, 1.0 + n / 1000) for n in (4, 8, 64, 256)]
    judged = goal(flat + [_row("generate", 8, 9.0)])
    assert judged["flat_within_1_5x"] and judged["grows_at_most_1_5x"]
    falling = goal([_row("continuous", 8, 4.0), _row("continuous", 256, 1.0)])
    assert not falling["flat_within_1_5x"] and falling["grows_at_most_1_5x"]
    rising = goal([_row("continuous", 8, 1.0), _row("continuous", 256, 2.0)])
    assert not rising["flat_within_1_5x"] and not rising["grows_at_most_1_5x"]
    assert rising["top_over_bottom"] == 2.0
