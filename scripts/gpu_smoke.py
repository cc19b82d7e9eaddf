"""The GPU path end to end, for whoever has a CUDA GPU: a real model, vLLM, a few GRPO rounds.

    scripts/setup.sh gpu
    .venv/bin/python scripts/gpu_smoke.py --model Qwen/Qwen2.5-0.5B-Instruct

Each round samples the SAPO tasks with vLLM, scores them, makes one GRPO update (fp32 weights,
bf16 autocast, gradient checkpointing, chunked log-probs) and pushes the weights into the
running engine. After each push it samples a few completions again and checks that vLLM's
log-probs of them match the trainer's within `--tolerance` (mean absolute difference per
token). At the end it checks that the weights moved and reports the peak GPU memory. It
exits 0 when every check held, 1 when one failed, 2 without a GPU or with a bad argument.
"""

from __future__ import annotations

import argparse
import sys

from lab.gpu_smoke import SmokeOptions, positive, run

D = SmokeOptions()  # the defaults


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; argparse exits 2 with one line on a bad argument."""
    parser = argparse.ArgumentParser(
        prog="gpu_smoke.py", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--model", default=D.model, help="name or path")
    parser.add_argument("--rounds", type=positive, default=D.rounds, help="GRPO rounds (default 5)")
    parser.add_argument("--questions", type=positive, default=D.questions, help="questions a round")
    parser.add_argument(
        "--completions", type=positive, default=D.completions, help="completions each"
    )
    parser.add_argument("--max-new-tokens", type=positive, default=D.max_new_tokens)
    parser.add_argument("--lr", type=float, default=D.lr, help="AdamW learning rate")
    parser.add_argument(
        "--micro-batch", type=positive, default=D.micro_batch, help="sequences a pass"
    )
    parser.add_argument("--gpu-memory", type=float, default=D.gpu_memory, help="vLLM GPU share")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=D.tolerance,
        help="largest mean |vLLM - trainer| log-prob per token after a push (default 0.05)",
    )
    parser.add_argument(
        "--generator",
        choices=("vllm", "transformers"),
        default=D.generator,
        help="vllm (default; needs the gpu extra) or transformers (the CPU-capable backend; the "
        "log-prob check then compares its sampling log-probs with the trainer's)",
    )
    parser.add_argument(
        "--tasks",
        choices=("sapo", "skills"),
        default=D.tasks,
        help="sapo (the SAPO mix, for real models) or skills (the four families the built-in "
        "testbed models under models/ were warm-started on)",
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=D.device,
        help="cuda (default), or cpu for a dry run of the same steps (transformers generator only)",
    )
    parser.add_argument("--seed", type=int, default=D.seed)
    args = parser.parse_args(argv)
    if args.device == "cpu" and args.generator == "vllm":
        parser.error("--device cpu needs --generator transformers")
    if not 0.05 <= args.gpu_memory <= 0.95:
        parser.error("--gpu-memory must lie in [0.05, 0.95]")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the smoke test; 0 if every check held."""
    return run(SmokeOptions(**vars(parse_args(argv))))


if __name__ == "__main__":
    sys.exit(main())
