"""How the suite splits over pytest-xdist's workers (``make test`` runs ``pytest -n 3 --dist loadgroup``).

Tests that share a server or engine started once form a group that one worker runs whole, one test after
another (:data:`SHARED_GROUPS`, everything under tests/cluster/); any other test's group is its file, so
package- and module-scoped fixtures set up once per worker, as under ``--dist loadfile``. Groups are handed
out longest first, by the seconds of a recent run (:data:`DURATIONS_FILE`), so that no long group starts
last while the other workers idle.

xdist's own ``loadgroup`` reads ``xdist_group`` marks into the test ids, which pytest 9.2 no longer lets it
rewrite (the marks are silently ignored). Here the workers write each test's group to a file of the run
(:func:`group_file`) as they collect, and the controller's scheduler (:class:`GroupScheduling`, through
xdist's ``pytest_xdist_make_scheduler`` hook) reads it. ``tests/conftest.py`` imports these hooks.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path

import pytest

#: Groups of tests sharing a server or engine, by the fixtures that start it. A test using fixtures of
#: several groups takes the first.
SHARED_GROUPS: tuple[tuple[str, frozenset[str]], ...] = (
    ("airflow-server", frozenset({"airflow_server"})),
    ("vllm", frozenset({"vllm_labeler", "vllm_labels", "vllm_server", "openai_labels"})),
)
#: Everything here is one group: its engines (munge, one Slurm node named after this host) exist once per
#: machine.
CLUSTER_TESTS = Path(__file__).resolve().parent / "cluster"
#: Seconds each group took in a recent full run (setup, call and teardown of its tests), written by
#: ``pytest --store-durations``. Only the order in which groups are handed out comes from it.
DURATIONS_FILE = Path(__file__).resolve().parent / "durations.json"


def xdist_group(item: pytest.Item) -> str:
    """The group of ``item``: a shared server's, else its file's."""
    if CLUSTER_TESTS in Path(str(item.path)).parents:
        return "cluster"
    names = set(getattr(item, "fixturenames", ()))
    for group, fixtures in SHARED_GROUPS:
        if names & fixtures:
            return group
    return item.nodeid.split("::")[0]


def running_under_xdist(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker or a controller starting workers."""
    return bool(getattr(config.option, "numprocesses", None)) or hasattr(config, "workerinput")


def group_file(run_id: str) -> Path:
    """Where the workers of run ``run_id`` write ``{test id: group}``."""
    return Path(tempfile.gettempdir()) / f"dripper-xdist-groups-{run_id}.json"


def _run_id(config: pytest.Config) -> str | None:
    if hasattr(config, "workerinput"):
        return config.workerinput["testrunuid"]
    return getattr(config.option, "testrunuid", None)


def _recorded_durations() -> dict[str, float]:
    try:
        return json.loads(DURATIONS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help=f"write each group's seconds to tests/{DURATIONS_FILE.name} (the order groups are handed out)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # The controller fixes the run's id before it starts the workers, so both ends name the same file.
    if running_under_xdist(config) and not hasattr(config, "workerinput") and not _run_id(config):
        config.option.testrunuid = uuid.uuid4().hex


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return
    groups = [xdist_group(item) for item in items]
    # Longest recorded group first; a stable sort keeps collection order within a group and among the
    # unknown ones (last). Every worker sorts alike: xdist requires identical collections.
    seconds = _recorded_durations()
    order = sorted(range(len(items)), key=lambda k: -seconds.get(groups[k], 0.0))
    items[:] = [items[k] for k in order]
    mapping = {items[k].nodeid: groups[order[k]] for k in range(len(items))}
    target = group_file(_run_id(config))
    partial = target.with_name(f"{target.name}.{os.getpid()}")
    partial.write_text(json.dumps(mapping), encoding="utf-8")
    os.replace(partial, target)  # every worker writes the same map; a reader never sees half of one


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup``: xdist's scope scheduler with the groups above as its scopes."""
    if config.getvalue("dist") != "loadgroup":
        return None
    config.option.loadscopereorder = False  # the workers' order (longest first) stands, not group sizes
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """Sends each group whole to one worker; groups in the workers' (duration) order."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = _read_groups(config)
            return self._groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


def _read_groups(config: pytest.Config) -> dict[str, str]:
    try:
        return json.loads(group_file(_run_id(config)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


_GROUP_SECONDS: dict[str, float] = {}
_GROUPS: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sums each group's seconds on the controller, which receives every worker's reports."""
    if not _GROUPS:
        return
    group = _GROUPS.get(report.nodeid, report.nodeid.split("::")[0])
    _GROUP_SECONDS[group] = _GROUP_SECONDS.get(group, 0.0) + report.duration


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    if not _GROUPS:
        _GROUPS.update(_read_groups(node.config))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not running_under_xdist(config):
        return
    if config.getoption("--store-durations") and _GROUP_SECONDS:
        ordered = sorted(_GROUP_SECONDS.items(), key=lambda kv: -kv[1])
        DURATIONS_FILE.write_text(json.dumps({g: round(s, 1) for g, s in ordered}, indent=1) + "\n")
    group_file(_run_id(config)).unlink(missing_ok=True)
