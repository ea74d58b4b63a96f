# syntax=docker/dockerfile:1
# GPU worker: CUDA vLLM and the extraction core. Runs either vLLM's OpenAI-compatible server (the compose
# service `vllm`, which the `openai` labeler calls) or a Dask worker with a GPU resource whose tasks run
# the `vllm` labeler's offline engine. The project with the dataplane, openai and vllm extras.
#
#   docker build -f docker/gpu-worker.Dockerfile -t dripper/gpu-worker .     (from the repository root)
#
# Needs an NVIDIA driver that supports CUDA 13.0 (>= 580) and the NVIDIA Container Toolkit on the host.
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-base-ubuntu24.04
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
# The same CPython minor version as the other images: Dask needs it on the client and every worker.
ARG PYTHON_VERSION=3.11.14

# ---- tools: pinned uv and the project's wheel ------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS tools
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
COPY docker/requirements/build.txt /tmp/build.txt
RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/build.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dripper ./dripper
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /dist .

# ---- build: a standalone CPython and the locked dependencies, on the runtime's distribution --------------
FROM ${CUDA_IMAGE} AS build
ARG PYTHON_VERSION
COPY --from=tools /usr/local/bin/uv /usr/local/bin/uv
ENV UV_NO_CACHE=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_PYTHON_PREFERENCE=only-managed \
    UV_LINK_MODE=copy
RUN uv python install "${PYTHON_VERSION}" \
    && uv venv --python "${PYTHON_VERSION}" /opt/venv
COPY docker/requirements/gpu-worker.txt /tmp/requirements.txt
COPY --from=tools /dist /dist
RUN uv pip install --python /opt/venv/bin/python --no-deps --require-hashes -r /tmp/requirements.txt \
    && uv pip install --python /opt/venv/bin/python --no-deps /dist/*.whl \
    && uv pip check --python /opt/venv/bin/python

# ---- runtime -----------------------------------------------------------------------------------------
FROM ${CUDA_IMAGE}
ARG DRIPPER_UID=10001
# A C compiler: Triton (under torch.compile and vLLM's kernels) builds a small launcher module at run time.
# The base image's tag fixes the Ubuntu release; its security updates are taken as they come.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid "${DRIPPER_UID}" dripper \
    && useradd --uid "${DRIPPER_UID}" --gid dripper --no-log-init --create-home --home-dir /home/dripper dripper
COPY --from=build /opt/python /opt/python
COPY --from=build /opt/venv /opt/venv
COPY --chmod=0755 docker/healthcheck.py /usr/local/bin/dripper-healthcheck
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/home/dripper/.cache/huggingface \
    VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 \
    DASK_DISTRIBUTED__WORKER__DAEMON=False
USER ${DRIPPER_UID}:${DRIPPER_UID}
WORKDIR /home/dripper
# vLLM's OpenAI-compatible server; a Dask worker's HTTP port when set to 8790.
EXPOSE 8000 8790
HEALTHCHECK --interval=30s --timeout=15s --start-period=600s --retries=5 CMD ["dripper-healthcheck"]
# vLLM's server through its module, the robust entry point (the `vllm serve` script fails on some builds).
CMD ["python", "-m", "vllm.entrypoints.openai.api_server", "--host", "0.0.0.0", "--port", "8000", "--model", "/models/extractor"]
