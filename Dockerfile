# aka on a CUDA machine: `docker build -t aka .` then `docker run --gpus all aka --help`.
# The service: `docker run --gpus all -p 8000:8000 -v aka-data:/home/aka aka serve` (tokens:
# `docker run -v aka-data:/home/aka aka token create --scopes read,submit`).
#
# Dependencies are installed by scripts/install-deps.sh, the same script CI runs (there without
# --gpu, so CI gets the CPU torch pin; here torch/triton come from the CUDA wheel index below).
#
# CUDA 13.0 matches the torch cu130 wheels and the GPU machine's nvcc 13.0 (ENVIRONMENT.md), so
# torch.utils.cpp_extension accepts the image's nvcc; the devel flavour is the one that has nvcc.
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04

# Where pip finds CUDA torch/triton wheels; override with --build-arg for another CUDA version.
ARG PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cu130

# python3-dev, gcc and g++ are needed at run time: triton compiles a C launcher per kernel, and
# torch.utils.cpp_extension builds CUDA candidates (with ninja).
# Ubuntu versions are not pinned: the archive drops superseded versions, so exact pins stop
# building within weeks; the pinned base tag fixes the release instead.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        g++ \
        gcc \
        ninja-build \
        python3 \
        python3-dev \
        python3-venv \
    && rm -rf /var/lib/apt/lists/*

# Ubuntu 24.04's system Python refuses pip installs (PEP 668), so aka lives in its own venv.
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1
RUN python3 -m venv "$VIRTUAL_ENV"

# The BuildKit cache mount keeps pip's downloads (torch is GBs) between builds but out of the image.
# `bash script` rather than `./script`: no reliance on the executable bit surviving the checkout.
WORKDIR /app
COPY . /app
RUN --mount=type=cache,target=/root/.cache/pip \
    PIP_DISABLE_PIP_VERSION_CHECK=1 bash scripts/install-deps.sh --gpu --no-dev

# Offline defaults (ENVIRONMENT.md): no hub retries, no cost-map fetch, no telemetry lookups.
# TRITON_INTERPRET is deliberately absent: this image runs kernels on the GPU.
# AKA_PATHS__ROOT: project data (configs/, reference_kernels/, knowledge_base/) is read from the
# copied checkout, which holds more than the configs packaged in the wheel.
ENV HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    ANONYMIZED_TELEMETRY=False \
    ORT_DISABLE_TELEMETRY=1 \
    AKA_PATHS__ROOT=/app

# A numeric, non-root user, so orchestrators can verify it (runAsNonRoot) without /etc/passwd.
RUN groupadd --gid 10001 aka \
    && useradd --no-log-init --create-home --uid 10001 --gid 10001 aka
USER 10001:10001

# `aka serve` listens on every interface inside the container (publish it with -p) and keeps its
# job store under the aka user's home, where a volume keeps it across containers.
ENV AKA_SERVICE__HOST=0.0.0.0 \
    AKA_SERVICE__DATA_DIR=/home/aka/service
EXPOSE 8000

ENTRYPOINT ["aka"]
CMD ["--help"]
