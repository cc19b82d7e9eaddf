"""What does each model of the skill swarm know at the start? A calibration table.

Builds (once, cached) the eight built-in skill models of `swarm.policy.skills` and, for each
model and each task family, samples `--completions` answers at `--temperature` to
`--questions` held-out questions, and measures:

- signal: the share of groups whose rewards are not all equal (GRPO can learn from them),
  with rewards 1 for a right tagged answer and 0 otherwise (the paper's stated reward);
  also with reasoning-gym's partial credit kept, and under the lenient rule (an untagged
  answer counts too);
- acc: per-completion accuracy, tagged and lenient;
- tag: the share of completions that contain a tagged answer.

What the skill swarm needs: on a family a model was warmed on, most groups carry signal; on
the others, almost none do; a model warmed with bare answers rarely writes the tag.

    python scripts/sapo_calibrate.py                          # all eight models
    python scripts/sapo_calibrate.py --nodes swarm-skill-0 --questions 16

Prints a table and writes JSON. Runs on one CPU thread unless told otherwise.
"""

from __future__ import annotations

import argparse

from lab.calibrate import run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--nodes",
        nargs="*",
        default=None,
        help="built-in model names (default: the whole skill swarm)",
    )
    parser.add_argument(
        "--testbed",
        default="skills",
        choices=("skills", "gap"),
        help="skills: the skill swarm; gap: the gap swarm (bold = strong, not weak)",
    )
    parser.add_argument("--questions", type=int, default=32, help="held-out questions per family")
    parser.add_argument(
        "--completions", type=int, default=8, help="completions per question (group size)"
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument(
        "--max-new-tokens", type=int, default=32, help="longest completion, in tokens"
    )
    parser.add_argument(
        "--seed", type=int, default=4_242, help="seed of the held-out questions and of sampling"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", default="runs/sapo_calibrate.json", help="JSON results")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    run(parse_args(argv))


if __name__ == "__main__":
    main()
