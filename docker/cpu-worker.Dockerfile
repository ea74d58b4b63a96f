# syntax=docker/dockerfile:1
# CPU worker: the Dask scheduler and Dask workers that run the page-level stages (WARC read, simplify,
# extract with the CPU labeler or the `openai` labeler against a vLLM server), datatrove for filtering,
# dedup and tokenizing. The project with the dataplane and openai extras; no CUDA, no torch.
#
#   docker build -f docker/cpu-worker.Dockerfile -t dripper/cpu-worker .     (from the repository root)
#
# Commands: `dask scheduler ...`, `dask worker tcp://SCHEDULER:8786 ...` (default: a scheduler),
# `dripper extract ...`.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: the locked dependencies and the project into /opt/venv -------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
COPY docker/requirements/build.txt /tmp/build.txt
RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/build.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dripper ./dripper
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /dist .
COPY docker/requirements/cpu-worker.txt /tmp/requirements.txt
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps --require-hashes -r /tmp/requirements.txt \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps /dist/*.whl \
    && /opt/venv/bin/pip check

# ---- runtime -----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG DRIPPER_UID=10001
RUN groupadd --gid "${DRIPPER_UID}" dripper \
    && useradd --uid "${DRIPPER_UID}" --gid dripper --no-log-init --create-home --home-dir /home/dripper dripper
COPY --from=build /opt/venv /opt/venv
COPY --chmod=0755 docker/healthcheck.py /usr/local/bin/dripper-healthcheck
# Worker processes are not daemons, so a task may start processes of its own (datatrove's local executor).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DASK_DISTRIBUTED__WORKER__DAEMON=False
USER ${DRIPPER_UID}:${DRIPPER_UID}
WORKDIR /home/dripper
# Dask scheduler, its dashboard (and /health), a worker's HTTP port when set to 8790.
EXPOSE 8786 8787 8790
HEALTHCHECK --interval=30s --timeout=15s --start-period=30s --retries=5 CMD ["dripper-healthcheck"]
CMD ["dask", "scheduler", "--host", "0.0.0.0", "--port", "8786", "--dashboard-address", ":8787"]
