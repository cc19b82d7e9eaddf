"""The GPU check: a GRPO round at the size volunteers run, per generator backend, beside TRL.

On one GPU, with no network: a random-weight Qwen2.5-0.5B-shaped model (built from its
config, the real 151,936-token vocabulary), 32 questions x 8 completions, 300-token prompts,
completions of 1,024 tokens (the random model never stops: the worst case). Per backend
(transformers' plain generate, transformers' continuous batching, vLLM where installed):
generated tokens/s, training tokens/s and MFU against the card's bf16 peak, round seconds,
peak GPU memory; TRL 1.16's GRPOTrainer on the same step where TRL imports; a private swarm
of 4 `swarm-node join` processes on the same card (pull exchange, shared_groups = 4, 5
rounds, groups of 8); the physical limits beside the figures (decoding bound by memory
bandwidth, training by the bf16 peak). Writes JSON under results/gpu/ and prints a table.
About 5 minutes on an H100 (budget: 8).

    python scripts/gpu_bench.py                        # the GPU check, 0.5B shape
    python scripts/gpu_bench.py --shape qwen2.5-1.5b   # the 1.5B shape
    python scripts/gpu_bench.py --device cpu --shape tiny --no-swarm   # the CPU dry run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv=None):
    from lab.gpu_bench import BACKENDS
    from lab.gpu_shapes import SHAPES

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    parser.add_argument("--device", default="cuda", help="cuda (the check) or cpu (dry run)")
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated generator backends to run (vllm is skipped where not installed)",
    )
    parser.add_argument("--no-trl", action="store_true", help="leave out TRL's GRPOTrainer")
    parser.add_argument("--no-swarm", action="store_true", help="leave out the 4-node swarm")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="start no arm (nor the swarm) after this many seconds (default 420)",
    )
    parser.add_argument(
        "--out", default="", help="JSON path (default results/gpu/<shape>-<device>.json)"
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from lab.gpu_bench import BACKENDS
    from lab.gpu_report import Options, run

    backends = tuple(b for b in args.backends.split(",") if b)
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        print(f"error: unknown backend(s) {', '.join(unknown)}: choose from {', '.join(BACKENDS)}")
        return 2
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("error: --device cuda needs a CUDA GPU: use --device cpu for the dry run")
            return 2
    name = f"{args.shape}-{args.device.split(':')[0]}.json"
    out = Path(args.out) if args.out else ROOT / "results" / "gpu" / name
    options = Options(
        args.shape, args.device, backends, not args.no_trl, not args.no_swarm, out, args.budget_s
    )
    run(options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
