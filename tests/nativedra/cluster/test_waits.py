"""A wait returns what it waited for as soon as it holds, and a wait that times out says what it
waited for and why it did not happen."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from nativedra.cluster.waits import WaitTimeoutError, http_ok, wait_for


def test_the_first_truthy_answer_is_returned() -> None:
    answers = iter([None, "", "node-a", "node-b"])
    assert wait_for(lambda: next(answers), timeout_s=5, what="a node", interval_s=0) == "node-a"


def test_a_timeout_names_what_was_awaited_and_the_evidence() -> None:
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError) as error:
        wait_for(lambda: None, timeout_s=0.05, what="pod ns/p to be scheduled", explain=lambda: "0/3 nodes fit")
    assert time.monotonic() - started < 2
    assert str(error.value) == "timed out after 0s waiting for pod ns/p to be scheduled\n0/3 nodes fit"


def test_a_timeout_fails_a_test_like_an_assertion() -> None:
    assert issubclass(WaitTimeoutError, AssertionError)


@pytest.fixture
def server() -> Iterator[http.server.HTTPServer]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/ready" else 503)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,))
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_http_ok_only_for_a_200(server: http.server.HTTPServer) -> None:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    assert http_ok(f"{base}/ready") is True
    assert http_ok(f"{base}/starting") is False


def test_http_ok_is_false_when_nothing_listens() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert http_ok(f"http://127.0.0.1:{port}/ready") is False
