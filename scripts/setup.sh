#!/usr/bin/env bash
# Set up swarm-node in ./.venv on a fresh machine: CPU PyTorch 2.13.0 first (so no
# dependency pulls a multi-GB CUDA build), then the project with its test and lint tools.
# Idempotent and quick on a second run: it reinstalls only when pyproject.toml changes.
# Pass extras to add, e.g. `scripts/setup.sh gpu` for vLLM on a GPU machine: then torch 2.13.0
# comes from PyPI, whose wheel is the CUDA 13 build that vLLM 0.32.0's compiled ops need
# (libcudart.so.13), and every install is held to constraints/gpu.txt (torch, vLLM and
# transformers versions that agree).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: swarm-node needs Python 3.11 or newer ($python is $("$python" --version 2>&1))" >&2
    exit 2
fi

# The NAT test (tests/integration/test_nat.py) builds network namespaces with ip and
# iptables: installed here where that is possible (root and apt-get). Never fails the set-up:
# without them that test is skipped, saying why.
nat_test_tools() {
    local missing=()
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v iptables >/dev/null 2>&1 || missing+=(iptables)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "note: ${missing[*]} missing (installing needs root and apt-get): the NAT test will be skipped" >&2
        return 0
    fi
    echo "installing ${missing[*]} for the NAT test..." >&2
    { timeout 300 apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null 2>&1 \
        || echo "note: could not install ${missing[*]}: the NAT test will be skipped" >&2
}
nat_test_tools || true

extras="dev${1:+,$1}"
stamp=".venv/.setup-$(cat pyproject.toml constraints/gpu.txt | sha256sum | cut -c1-16)-${extras}"
if [ -f "$stamp" ]; then
    exit 0
fi

echo "setting up .venv (one time: about two minutes)..." >&2
[ -x .venv/bin/python ] || "$python" -m venv .venv
pin=()
torch_index=()
if [[ ",${1:-}," == *,gpu,* ]]; then
    pin=(-c constraints/gpu.txt)
    torch_index=(--index-url "${TORCH_INDEX:-https://pypi.org/simple}")
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "${torch_index[@]}" "${pin[@]}" "torch==2.13.0" 2>&1 | grep -v "is ignored" >&2 || true
.venv/bin/python -m pip install --quiet --disable-pip-version-check "${pin[@]}" -e ".[${extras}]" 2>&1 | grep -v "is ignored" >&2 || true
.venv/bin/python -c "import torch, swarm; assert torch.__version__.startswith('2.13.0'), torch.__version__" \
    || { echo "error: setup failed (see pip output above)" >&2; exit 1; }
rm -f .venv/.setup-*
touch "$stamp"
echo "set up: .venv/bin/swarm-node is ready" >&2
