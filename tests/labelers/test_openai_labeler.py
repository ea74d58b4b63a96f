"""The ``openai`` labeler against a real ``vllm`` server, and its retries, timeouts and fallbacks."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.labelers.conftest import TEST_CONTEXT

pytestmark = pytest.mark.slow


def test_server_labels_equal_the_torch_engine(openai_labels, torch_labels):
    for served, ours in zip(openai_labels, torch_labels, strict=True):
        assert served.failure is None, served.failure
        assert served.main == ours.main
        assert served.confidence == pytest.approx(ours.confidence, abs=2e-3)


def test_chat_endpoint_gives_the_same_labels(vllm_server, agreement_requests, torch_labels):
    from dripper.labelers.openai_labeler import OpenAILabeler

    labeler = OpenAILabeler(
        vllm_server.base_url, vllm_server.model, max_model_len=TEST_CONTEXT, endpoint="chat"
    )
    labels = labeler(agreement_requests[:3])
    assert [label.main for label in labels] == [label.main for label in torch_labels[:3]]


class _FlakyServer:
    """A loopback completions server: the first ``failures`` requests get ``status``, then a valid answer."""

    def __init__(self, failures: int, status: int = 503, delay: float = 0.0) -> None:
        self.failures, self.status, self.delay = failures, status, delay
        self.requests = self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner.lock:
                    owner.requests += 1
                    number = owner.requests
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                time.sleep(owner.delay)
                with owner.lock:
                    owner.in_flight -= 1
                assert body["structured_outputs"]["regex"].startswith("<answer>")
                if number <= owner.failures:
                    self.send_response(owner.status)
                    self.end_headers()
                    return
                n_blocks = body["structured_outputs"]["regex"].count("(main|other)")
                text = "<answer>" + "".join(f"{i}main" for i in range(1, n_blocks + 1)) + "</answer>"
                payload = json.dumps({"choices": [{"text": text}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _labeler(server, tiny_model_dir, **options):
    from dripper.labelers.openai_labeler import OpenAILabeler

    options = {"max_model_len": TEST_CONTEXT, "backoff": 0.01, "logprobs": 0, **options}
    return OpenAILabeler(server.base_url, str(tiny_model_dir), **options)


def test_retries_then_succeeds_with_bounded_concurrency(tiny_model_dir, agreement_requests):
    server = _FlakyServer(failures=2, delay=0.05)
    try:
        labeler = _labeler(server, tiny_model_dir, max_concurrency=2)
        labels = labeler(agreement_requests[:6])
        assert all(label.main is not None and all(label.main) for label in labels)
        assert labeler.retries == 2
        assert server.max_in_flight <= 2
    finally:
        server.close()


def test_pages_that_keep_failing_go_to_the_fallback(tiny_model_dir, agreement_requests):
    server = _FlakyServer(failures=10_000, status=500)
    try:
        labels = _labeler(server, tiny_model_dir, max_retries=1)(agreement_requests[:2])
        assert all(label.main is None and "after 2 attempts: HTTP 500" in label.failure for label in labels)
    finally:
        server.close()


def test_client_errors_are_not_retried_and_timeouts_fail(tiny_model_dir, agreement_requests):
    server = _FlakyServer(failures=10_000, status=400)
    try:
        labeler = _labeler(server, tiny_model_dir)
        (label,) = labeler(agreement_requests[:1])
        assert "after 1 attempts: HTTP 400" in label.failure and labeler.retries == 0
    finally:
        server.close()
    slow = _FlakyServer(failures=0, delay=2.0)
    try:
        (label,) = _labeler(slow, tiny_model_dir, timeout=0.3, max_retries=0)(agreement_requests[:1])
        assert "ReadTimeout" in label.failure
    finally:
        slow.close()


def _dead_url() -> str:
    from tests.conftest import free_port

    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there


def test_several_servers_share_the_pages_and_a_dead_one_is_passed_over(tiny_model_dir, agreement_requests):
    live, other = _FlakyServer(failures=0), _FlakyServer(failures=0)
    dead = _dead_url()
    try:
        from dripper.labelers.openai_labeler import OpenAILabeler

        both = OpenAILabeler([live.base_url, other.base_url], str(tiny_model_dir), max_model_len=TEST_CONTEXT,
                             logprobs=0, backoff=0.01)  # fmt: skip
        labels = both(agreement_requests[:8])
        assert all(label.main is not None for label in labels)
        assert live.requests > 0 and other.requests > 0  # round robin
        with_dead = OpenAILabeler(f"{dead},{live.base_url}", str(tiny_model_dir), max_model_len=TEST_CONTEXT,
                                  logprobs=0, backoff=0.01, max_retries=0, max_concurrency=1)  # fmt: skip
        labels = with_dead(agreement_requests[:8])
        assert all(label.main is not None and label.failure is None for label in labels)
        stats = with_dead.endpoint_stats
        assert stats[dead]["answers"] == 0 and stats[dead]["failures"] == 1  # set aside after one refusal
        assert stats[live.base_url]["answers"] == len(with_dead.planner.plan(agreement_requests[:8])[0])
    finally:
        live.close()
        other.close()


def test_a_dead_server_beside_a_live_vllm_server_changes_no_label(
    vllm_server, agreement_requests, openai_labels
):
    from dripper.labelers.openai_labeler import OpenAILabeler

    vllm_server.wait()
    dead = _dead_url()
    labeler = OpenAILabeler([dead, vllm_server.base_url], vllm_server.model, max_model_len=TEST_CONTEXT)
    labels = labeler(agreement_requests)
    assert [label.main for label in labels] == [label.main for label in openai_labels]
    assert labeler.endpoint_stats[dead]["answers"] == 0 and labeler.endpoint_stats[dead]["failures"] >= 1
