#!/usr/bin/env bash
# Set up swarm-node in ./.venv on a fresh machine: CPU PyTorch 2.13.0 first (so no
# dependency pulls a multi-GB CUDA build), then the project with its test and lint tools,
# and the lab (lab/: experiments and benchmarks, a distribution of its own) editable beside it.
# Idempotent and quick on a second run: it reinstalls only when pyproject.toml or
# lab/pyproject.toml changes. Pass extras to add, e.g. `scripts/setup.sh gpu` for vLLM on a GPU machine: then torch 2.13.0
# comes from PyPI, whose wheel is the CUDA 13 build that vLLM 0.32.0's compiled ops need
# (libcudart.so.13), and every install is held to constraints/gpu.txt (torch, vLLM and
# transformers versions that agree).
# It installs no system package unless asked: `--system-packages` (or SWARM_SETUP_SYSTEM=1,
# which .ci/run sets) lets it install the NAT test's tools (iproute2, iptables) with apt-get
# when run as root.
# Beside the venv it installs the oldest supported transformers (constraints/
# transformers-oldest.txt) into .venv/compat/transformers-<version>, for the suite's run of the
# generator tests at that end of the range (tests/unit/policy/test_transformers_oldest.py).
set -euo pipefail

SYSTEM_HINT="SWARM_SETUP_SYSTEM=1 scripts/setup.sh (as root, with apt-get)"

# The NAT test (tests/integration/test_nat.py) builds network namespaces with ip and
# iptables. With $1 = 1 they are installed where that is possible (root and apt-get); else
# only a note says what is missing. Never fails the set-up: without them that test is
# skipped, saying why.
nat_test_tools() {
    local missing=()
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v iptables >/dev/null 2>&1 || missing+=(iptables)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "${1:-0}" != 1 ]; then
        echo "note: ${missing[*]} missing, so the NAT test will be skipped; $SYSTEM_HINT installs them" >&2
        return 0
    fi
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "note: ${missing[*]} missing (installing needs root and apt-get): the NAT test will be skipped" >&2
        return 0
    fi
    echo "installing ${missing[*]} for the NAT test..." >&2
    { timeout 300 apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null 2>&1 \
        || echo "note: could not install ${missing[*]}: the NAT test will be skipped" >&2
}

OLDEST=constraints/transformers-oldest.txt

# The version of transformers that $OLDEST pins.
oldest_version() {
    sed -n 's/^transformers==\([0-9][0-9.]*\).*/\1/p' "$OLDEST"
}

# The oldest supported transformers, and only what it needs at other versions than the venv
# has, into .venv/compat/transformers-<version> (pip --target, no dependencies: the rest
# comes from the venv); an older folder is replaced. Checked by importing it from there.
oldest_transformers() {
    local version target
    version=$(oldest_version)
    target=".venv/compat/transformers-$version"
    rm -rf .venv/compat
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
        --target "$target" -r "$OLDEST" 2>&1 | grep -v "is ignored" >&2 || true
    PYTHONPATH="$target" .venv/bin/python -c \
        "import transformers; assert transformers.__version__ == '$version', transformers.__version__" \
        || { echo "error: transformers $version did not install into $target" >&2; return 1; }
}

# 1 if system packages may be installed (--system-packages among the arguments, or
# SWARM_SETUP_SYSTEM=1), else 0.
system_packages() {
    local arg
    for arg in "$@"; do
        [ "$arg" = --system-packages ] && { echo 1; return 0; }
    done
    [ "${SWARM_SETUP_SYSTEM:-0}" = 1 ] && echo 1 || echo 0
}

main() {
    cd "$(dirname "$0")/.."
    local system extra="" arg
    system=$(system_packages "$@")
    for arg in "$@"; do
        [ "$arg" = --system-packages ] || { extra=$arg; break; }
    done

    python=${PYTHON:-python3}
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "error: swarm-node needs Python 3.11 or newer ($python is $("$python" --version 2>&1))" >&2
        exit 2
    fi

    nat_test_tools "$system" || true

    extras="dev${extra:+,$extra}"
    stamp=".venv/.setup-$(cat pyproject.toml lab/pyproject.toml constraints/gpu.txt "$OLDEST" | sha256sum | cut -c1-16)-${extras}"
    if [ -f "$stamp" ]; then
        exit 0
    fi

    echo "setting up .venv (one time: about two minutes)..." >&2
    [ -x .venv/bin/python ] || "$python" -m venv .venv
    pin=()
    torch_index=()
    if [[ ",$extra," == *,gpu,* ]]; then
        pin=(-c constraints/gpu.txt)
        torch_index=(--index-url "${TORCH_INDEX:-https://pypi.org/simple}")
    fi
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "${torch_index[@]}" "${pin[@]}" "torch==2.13.0" 2>&1 | grep -v "is ignored" >&2 || true
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "${pin[@]}" -e ".[${extras}]" -e ./lab 2>&1 | grep -v "is ignored" >&2 || true
    .venv/bin/python -P -c "import torch, swarm, lab; assert torch.__version__.startswith('2.13.0'), torch.__version__" \
        || { echo "error: setup failed (see pip output above)" >&2; exit 1; }
    oldest_transformers || exit 1
    rm -f .venv/.setup-*
    touch "$stamp"
    echo "set up: .venv/bin/swarm-node is ready" >&2
}

# sourced (as the tests do), it only defines the functions above
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
