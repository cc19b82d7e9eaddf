"""How a model answers with and without worked examples in its prompt: the share of tagged
answers and of right ones, greedy and sampled, on the same questions of the easy mix.

    python scripts/bench_prompt_format.py                       # smollm2-135m, 24 questions
    python scripts/bench_prompt_format.py --model swarm-tiny --questions 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.prompt_format import main

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m", help="policy.model to load")
    parser.add_argument("--questions", type=int, default=24, help="questions of the easy mix")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per completion")
    parser.add_argument("--seed", type=int, default=7, help="task stream and sampling seed")
    parser.add_argument(
        "--out", default=str(ROOT / "results" / "real_model" / "prompt_format.json"),
        help="the JSON to write",
    )  # fmt: skip
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    sys.exit(main(args.model, args.questions, args.max_new_tokens, args.seed, Path(args.out)))
