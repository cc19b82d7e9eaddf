# swarm-node in a container: CPU image by default, CUDA image with --build-arg VARIANT=cuda.
#
#   docker build -t swarm-node .                          # CPU: torch 2.13.0 CPU build
#   docker build -t swarm-node:cuda --build-arg VARIANT=cuda .   # CUDA torch + vLLM (the gpu extra)
#   docker run --rm swarm-node --version
#
# PyTorch is installed first, so that installing the project afterwards never pulls a
# different (multi-GB) torch build: the CPU variant from PyTorch's CPU index; the CUDA variant
# from PyPI, whose torch 2.13.0 wheel is the CUDA 13 build that vLLM 0.32.0's compiled ops
# link (libcudart.so.13), with every install held to constraints/gpu.txt. The CUDA variant
# also gets a C compiler: Triton compiles its launcher on first use. The built-in tiny
# model is built into the image, so containers start without building it. A node keeps its
# state in /data (mount a run folder there); compose.yaml runs a private cluster.
FROM python:3.11-slim

ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
ARG TORCH_CUDA_INDEX=https://pypi.org/simple

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SWARM_NODE_CACHE=/opt/swarm-node/cache \
    HF_HOME=/tmp/huggingface

WORKDIR /opt/swarm-node
COPY constraints ./constraints
RUN case "$VARIANT" in \
        cpu) index="$TORCH_CPU_INDEX"; pin="" ;; \
        cuda) index="$TORCH_CUDA_INDEX"; pin="-c constraints/gpu.txt" \
            && apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
            && rm -rf /var/lib/apt/lists/* ;; \
        *) echo "VARIANT must be cpu or cuda, not $VARIANT" >&2; exit 2 ;; \
    esac \
    && pip install $pin "torch==${TORCH_VERSION}" --index-url "$index"

COPY pyproject.toml README.md ./
COPY swarm ./swarm
COPY node_config ./node_config
RUN extras=""; pin=""; [ "$VARIANT" = cuda ] && extras="[gpu]" && pin="-c constraints/gpu.txt"; \
    pip install $pin ".${extras}" \
    && python -c "import torch; assert torch.__version__.startswith('${TORCH_VERSION}'), torch.__version__" \
    && python -c "from swarm.policy.tiny import ensure_tiny_model; ensure_tiny_model(quiet=True)" \
    && chmod -R a+rX "$SWARM_NODE_CACHE"

# Any user may run the image (compose runs it as the owner of the mounted folders).
RUN useradd --system --uid 10001 --home-dir /data --no-create-home swarm \
    && mkdir -p /data && chown swarm /data
USER swarm
WORKDIR /data
VOLUME ["/data"]

ENTRYPOINT ["swarm-node"]
CMD ["--help"]
