#!/usr/bin/env bash
# The GPU check on a GPU machine with no network: scripts/gpu_bench.py at the 0.5B shape.
#
# Beyond the machine's torch and transformers, the check imports msgspec and, for TRL's
# arm, TRL and what TRL's trainer imports (datasets, accelerate, pandas, pyarrow, ...).
# On a machine with PyPI, `scripts/gpu_check.sh --wheels` fills .whl/ (git-ignored) with
# their wheels for Python 3.12 on x86-64 (scripts/gpu_wheels.py: 3.3 MB; pandas and
# pyarrow, 67 MB more, only with --all, else the GPU machine's own are used). Copy the
# checkout with .whl/ to the GPU machine: there this script installs .whl/ alone (pip
# --no-index) into /tmp/gpu-check/site-packages (GPU_CHECK_DIR=/tmp/gpu-check), checks that
# every requirement is met, and stops with one line per missing one before the bench
# starts. The JSON lands in results/gpu/ (and in $OUT where that names a folder); the log
# beside it.
#
#   scripts/gpu_check.sh --wheels          # here: download the wheels
#   scripts/gpu_check.sh                   # there: the check (budget 7 minutes)
#   scripts/gpu_check.sh --shape qwen2.5-1.5b --no-swarm
#   PATH=.venv/bin:$PATH scripts/gpu_check.sh --device cpu --shape tiny --no-swarm   # CPU dry run
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--wheels" ]; then
    shift
    exec python3 scripts/gpu_wheels.py download "$@"
fi

# A folder named site-packages: datasets hashes its work with dill, which pickles a module's
# classes by reference only where the module lives under the interpreter's prefix or in a
# site-packages folder (elsewhere by value, which fails on pyarrow's types).
site="${GPU_CHECK_DIR:-/tmp/gpu-check}/site-packages"
trl=""
for arg in "$@"; do
    if [ "$arg" = --no-trl ]; then trl=--no-trl; fi
done
python3 scripts/gpu_wheels.py install --site "$site" $trl
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"
mkdir -p results/gpu
set +e
timeout 470 python3 scripts/gpu_bench.py "$@" 2>&1 | tee results/gpu/gpu_bench.log
status=${PIPESTATUS[0]}
set -e
if [ -n "${OUT:-}" ] && [ -d "${OUT}" ]; then
    cp results/gpu/*.json results/gpu/gpu_bench.log "$OUT"/ 2>/dev/null || true
fi
exit "$status"
