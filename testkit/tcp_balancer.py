"""A loopback TCP round-robin balancer that stands for a Kubernetes Service in front of replicas.

kube-proxy hands each new connection to one endpoint and never looks inside it; so does this: TLS
passes through untouched and each backend terminates mutual TLS itself, as the extender's pods do.
A backend that refuses the connection (its process was killed) is skipped for the next one, as a
Service drops an endpoint whose pod is gone, only at once, which keeps the e2e tests short.
It listens on 127.0.0.1 only, holds at most `max_connections` at a time, and stops with the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

_CHUNK = 64 * 1024


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy one direction until its end; a reset ends the copy as an orderly close does."""
    with contextlib.suppress(ConnectionError):
        while chunk := await source.read(_CHUNK):
            sink.write(chunk)
            await sink.drain()


class TcpBalancer:
    """Round robin over `backends` (loopback ports), one choice per connection. `served[i]` counts
    the connections backend i has taken and `latest` is the backend of the newest one: a client that
    keeps its connection alive (kube-scheduler does) is talking to `latest`. Port 0 (the default)
    listens on a port the kernel picks, `port` once entered; `backends` may be given after that."""

    def __init__(
        self,
        port: int = 0,
        backends: list[int] | None = None,
        *,
        max_connections: int = 64,
        connect_timeout_s: float = 2.0,
    ) -> None:
        self.port = port
        self.backends: list[int] = []
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.served: list[int] = []
        self.set_backends(backends or [])
        self.latest: int | None = None
        self._next = 0
        self._connections: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._listening = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tcp-balancer", daemon=True)

    def __enter__(self) -> TcpBalancer:
        self._thread.start()
        if not self._listening.wait(10):
            raise TimeoutError(f"the balancer did not listen on 127.0.0.1:{self.port or 'a free port'} within 10 s")
        if self._failure:
            raise self._failure
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._loop and self._stopping:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    def set_backends(self, backends: list[int]) -> None:
        """The replicas' ports, in order; counts start again."""
        self.backends = list(backends)
        self.served = [0] * len(backends)

    def route_to(self, index: int) -> None:
        """Drop every open connection and send the next new one to backend `index`, so a test picks
        the replica a keep-alive client (kube-scheduler) talks to. Only while the client is idle:
        a request in flight on a dropped connection fails."""
        if self._loop is None:
            raise RuntimeError("the balancer is not running")
        asyncio.run_coroutine_threadsafe(self._route_to(index), self._loop).result(10)

    async def _route_to(self, index: int) -> None:
        self._next = index
        await self._drop_connections()

    async def _drop_connections(self) -> None:
        dropped = list(self._connections)
        for connection in dropped:
            connection.cancel()
        await asyncio.gather(*dropped, return_exceptions=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # noqa: BLE001 - handed to the test thread by __enter__
            self._failure = error
        finally:
            self._listening.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._listening.set()
        async with server:
            await self._stopping.wait()
            server.close()
            await self._drop_connections()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        """One client connection: to the next backend that accepts, both directions copied until
        either side ends, then both closed (TLS over HTTP/1.1 never half-closes)."""
        this = asyncio.current_task()
        if this is None or len(self._connections) >= self.max_connections:
            client_writer.close()
            return
        self._connections.add(this)
        try:
            upstream = await self._connect()
            if upstream is None:
                return
            backend_reader, backend_writer = upstream
            directions = [
                asyncio.create_task(_pump(client_reader, backend_writer)),
                asyncio.create_task(_pump(backend_reader, client_writer)),
            ]
            try:
                await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for direction in directions:
                    direction.cancel()
                await asyncio.gather(*directions, return_exceptions=True)
                backend_writer.close()
        finally:
            client_writer.close()
            self._connections.discard(this)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The next backend in turn that accepts a connection, each tried at most once."""
        for _ in self.backends:
            index = self._next
            self._next = (self._next + 1) % len(self.backends)
            try:
                upstream = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", self.backends[index]), self.connect_timeout_s
                )
            except (OSError, TimeoutError):
                continue
            self.served[index] += 1
            self.latest = index
            return upstream
        return None
