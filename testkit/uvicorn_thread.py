"""A uvicorn server run in a thread of the test process, on a loopback port the kernel picked."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn


def loopback_port() -> int:
    """A port the kernel handed out and released (a server started next binds it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def running(server: uvicorn.Server) -> Iterator[None]:
    """`server` serving for the block (it has started when the block begins), stopped after it."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)
