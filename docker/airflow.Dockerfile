# syntax=docker/dockerfile:1
# Airflow 3: API server, scheduler (LocalExecutor: tasks run here), DAG processor, triggerer, and Celery
# workers when the Celery profile is on. The project with the airflow, dataplane and openai extras; no torch.
#
#   docker build -f docker/airflow.Dockerfile -t dripper/airflow .     (from the repository root)
#
# The command is an `airflow` subcommand: `api-server` (default), `scheduler`, `dag-processor`,
# `triggerer`, `celery worker`, `db migrate`, ...
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---- build: the locked dependencies and the project into /opt/venv -------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# The project's wheel, built with the pinned build backend.
COPY docker/requirements/build.txt /tmp/build.txt
RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/build.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY dripper ./dripper
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /dist .
# Every third-party distribution comes from the lock, hash-checked; the project adds none of its own.
COPY docker/requirements/airflow.txt /tmp/requirements.txt
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps --require-hashes -r /tmp/requirements.txt \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps /dist/*.whl \
    && /opt/venv/bin/pip check

# ---- runtime -----------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG AIRFLOW_UID=50000
RUN groupadd --gid "${AIRFLOW_UID}" airflow \
    && useradd --uid "${AIRFLOW_UID}" --gid airflow --no-log-init --create-home --home-dir /opt/airflow airflow \
    && install -d -o airflow -g airflow /opt/airflow/dags /opt/airflow/logs /opt/airflow/plugins
COPY --from=build /opt/venv /opt/venv
# The DAG files (the pattern lets the build pass while dags/ is still empty: Git keeps no empty folder).
COPY --chown=airflow:airflow dag[s] /opt/airflow/dags/
COPY --chmod=0755 docker/healthcheck.py /usr/local/bin/dripper-healthcheck
COPY --chmod=0755 docker/airflow-entrypoint.sh /usr/local/bin/dripper-airflow
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK=True
USER ${AIRFLOW_UID}:${AIRFLOW_UID}
WORKDIR /opt/airflow
# API server, task log server, scheduler health server.
EXPOSE 8080 8793 8974
HEALTHCHECK --interval=30s --timeout=30s --start-period=60s --retries=5 CMD ["dripper-healthcheck"]
ENTRYPOINT ["dripper-airflow"]
CMD ["api-server"]
