#!/usr/bin/env bash
# The GPU check on a GPU machine with no network: scripts/gpu_bench.py at the 0.5B shape.
#
# Where the machine lacks what the bench imports (msgspec, trio; TRL and datasets for TRL's
# arm), bring it as wheels: on a machine with PyPI, `scripts/gpu_check.sh --wheels` fills
# .whl/ (git-ignored) for Python 3.12 on x86-64; copy the checkout with .whl/ to the GPU
# machine, where this script installs them into /tmp/site first. The JSON lands in
# results/gpu/ (and in $OUT where that names a folder); the log beside it.
#
#   scripts/gpu_check.sh --wheels          # here: download the wheels (about 3 MB)
#   scripts/gpu_check.sh                   # there: the check (budget 7 minutes)
#   scripts/gpu_check.sh --shape qwen2.5-1.5b --no-swarm
set -euo pipefail
cd "$(dirname "$0")/.."

# msgspec, trio (+ outcome, sniffio) for swarm's own modules; trl, datasets (+ dill,
# multiprocess) for TRL's arm. A node (the 4-process swarm) needs far more (libp2p,
# cryptography, sqlalchemy, reasoning-gym, ...: about 40 MB of wheels).
WHEELS="msgspec==0.22.0 trio==0.35.0 outcome==1.3.0.post0 sniffio==1.3.1 trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19"

if [ "${1:-}" = "--wheels" ]; then
    mkdir -p .whl
    for wheel in $WHEELS; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
            --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 -d .whl "$wheel"
    done
    du -sh .whl
    exit 0
fi

if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
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
