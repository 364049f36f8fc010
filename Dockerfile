# structserve image. Two targets from one file, chosen by build arguments:
#   CPU (default):  docker build -t structserve:cpu .
#   Ascend NPU:     docker build -t structserve:npu --build-arg TARGET=npu \
#                     --build-arg BASE_IMAGE=<a CANN 8.x image with Python 3.11, e.g. ascendai/cann> .
# Both run scripts/setup.sh, the same script CI runs; the NPU target adds TORCH_NPU_SPEC (pin the
# torch_npu release matching requirements/torch.txt) and serves with engine.device npu. The NPU
# image is not built or run here (no NPU, no CANN image): unverified.
# Without a registry (podman + a local Debian base): scripts/container.sh, docs/deployment.md.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS base
# g++: SGLang's CPU path compiles kernels with torch inductor at the first request. Debian's own
# python3 (3.11 on bookworm, with headers) when the base image has none.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ ca-certificates \
       $(command -v python3.11 >/dev/null || echo python3 python3-venv python3-dev) \
    && rm -rf /var/lib/apt/lists/*

FROM base AS deps
# The dependency venv, in its own stage: reused (and copied into the image unchanged) while only
# the code changes. Optional, for builds behind a private CA or with local wheels: mount them at
# build time and pass their paths (never baked into the image).
ARG PIP_CERT=
ARG PIP_FIND_LINKS=
ARG PIP_INDEX_URL=
ARG TARGET=cpu
ARG TORCH_NPU_SPEC=torch_npu
WORKDIR /opt/structserve
ENV STRUCTSERVE_VENV=/opt/venv
COPY requirements requirements
COPY shims shims
COPY scripts/setup.sh scripts/setup_gateway.sh scripts/
RUN STRUCTSERVE_SETUP_DEPS_ONLY=1 bash scripts/setup.sh \
    && if [ "$TARGET" = npu ]; then /opt/venv/bin/python -m pip install "$TORCH_NPU_SPEC"; fi
# SGLang's model gateway (smg) in its own venv: the same image runs replicas and the gateway
# (deploy/compose.yaml, scripts/container.sh gateway; docs/scale-out.md)
RUN STRUCTSERVE_GATEWAY_VENV=/opt/gateway bash scripts/setup_gateway.sh && rm -f .venv-gateway

FROM base
ARG TARGET=cpu
ENV STRUCTSERVE_VENV=/opt/venv
COPY --from=deps /opt/venv /opt/venv
COPY --from=deps /opt/gateway /opt/gateway
WORKDIR /opt/structserve
# Prefill/decode disaggregation (deploy/compose-pd.yaml): Mooncake's CUDA-free transfer engine
# (pinned) and the Debian libraries it links; a few MB, in a layer of its own.
ARG PIP_CERT=
ARG PIP_FIND_LINKS=
ARG PIP_INDEX_URL=
COPY requirements/optional/pd.txt requirements/optional/pd.txt
COPY scripts/setup_pd.sh scripts/setup_pd.sh
RUN STRUCTSERVE_VENV=/opt/venv bash scripts/setup_pd.sh && rm -rf /var/lib/apt/lists/*
COPY requirements requirements
COPY shims shims
COPY scripts scripts
COPY pyproject.toml README.md ./
COPY service service
COPY runtime_ext runtime_ext
COPY grammars grammars
COPY assets assets
COPY tools tools
COPY configs configs
# the same script again: dependencies are there (stamp), it installs the project itself
RUN bash scripts/setup.sh && rm -f .venv \
    && useradd --system --uid 10001 --create-home --home-dir /home/structserve structserve \
    && mkdir -p /models /cache && chown structserve /models /cache
# /cache: the asset cache (the default model is fetched and verified there on first start);
# /models: your own model directories (STRUCTSERVE_MODEL=/models/<name>).
VOLUME ["/cache", "/models"]
ENV PATH=/opt/venv/bin:$PATH \
    STRUCTSERVE_CACHE_DIR=/cache \
    STRUCTSERVE_HOST=0.0.0.0 \
    STRUCTSERVE_PORT=8000 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    STRUCTSERVE_ENGINE__DEVICE=${TARGET}
USER structserve
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=300s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('STRUCTSERVE_PORT', '8000')}/health\", timeout=4)"]
STOPSIGNAL SIGTERM
CMD ["structserve", "serve"]
