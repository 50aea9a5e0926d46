"""Claims read from an API server that misbehaves: every read ends within its bound, with an error
naming the claim."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client

from dra_driver.errors import PrepareError
from dra_driver.kubelet.claim import ClaimRef
from dra_driver.kubelet.claim_api import api_claim_reader


@contextlib.contextmanager
def silent_api_server() -> Iterator[str]:
    """A TCP listener that accepts connections and never answers: an API server that hangs."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # the listener is closed at the end
            while len(held) < 16:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for connection in held:
            connection.close()


def test_a_claim_read_from_an_api_server_that_never_answers_ends_within_the_bound() -> None:
    with silent_api_server() as url:
        configuration = client.Configuration()
        configuration.host = url
        read = api_claim_reader(client.ApiClient(configuration), timeout_s=1)
        ref = ClaimRef("ns", str(uuid.uuid4()), "train")
        outcome: list[BaseException | dict[str, Any]] = []
        worker = threading.Thread(target=lambda: outcome.append(_outcome(read, ref)), daemon=True)
        started = time.monotonic()
        worker.start()
        worker.join(timeout=10)
        elapsed = time.monotonic() - started
    assert outcome, "the read was still waiting for the API server after 10 s"
    [error] = outcome
    assert isinstance(error, PrepareError) and error.reason == "api_error"
    assert f"claim ns/train ({ref.uid})" in str(error) and "within 1 s" in str(error)
    assert elapsed < 3, f"one attempt of 1 s, no retries: took {elapsed:.1f} s"


def _outcome(read: Callable[[ClaimRef], dict[str, Any]], ref: ClaimRef) -> BaseException | dict[str, Any]:
    try:
        return read(ref)
    except PrepareError as error:
        return error
