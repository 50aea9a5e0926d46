"""The HTTP face of the extender: /filter, /prioritize, /healthz, /readyz, /metrics.

No single request may stop scheduling: bodies are bounded by the cluster's size and read only up
to that bound, malformed ones get a 400 naming the field, the fast path (no claims, no gang) is
answered on the event loop so it never waits behind planning, planning runs in a small pool of
its own with a bounded queue, and /healthz fails when a request has been stuck long enough for
the kubelet to restart the process.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import Receive, Scope, Send

from extender.cluster.state import ClusterState
from extender.plan.decide import RETRY, Decider
from extender.pods.facts import PodFacts
from extender.serve import metrics
from extender.serve.health import Watchdog
from extender.serve.wire import ExtenderArgs, MalformedBodyError, encode_priorities, filter_result, parse_args

log = logging.getLogger(__name__)
T = TypeVar("T")
Filtered = tuple[list[str], dict[str, str], str]  # passing nodes, failed nodes with reasons, path


@dataclass(frozen=True)
class RequestLimits:
    """What one caller can make the extender spend."""

    body_floor_bytes: int = 1024 * 1024
    # 5,000 node names are ~150 KB; a full Node object (nodeCacheCapable: false) is bigger, which is
    # one more reason the scheduler config must say nodeCacheCapable: true.
    body_bytes_per_node: int = 1024
    planning_workers: int = 4
    planning_queue: int = 32  # requests waiting for or holding a planning worker
    stuck_after_seconds: float = 60.0

    def body_limit(self, nodes: int) -> int:
        return max(self.body_floor_bytes, nodes * self.body_bytes_per_node)


def _refuse(verb: str, status: int, reason: str) -> JSONResponse:
    metrics.BAD_REQUESTS.labels(verb).inc()
    log.warning("refused %s call (%d): %s", verb, status, reason)
    return JSONResponse({"Error": f"{verb}: {reason}"}, status_code=status)


class _Handler:
    """Reading, parsing and dispatching one verb's calls under the limits."""

    def __init__(self, state: ClusterState, limits: RequestLimits, watchdog: Watchdog) -> None:
        self.state = state
        self.limits = limits
        self.watchdog = watchdog
        self._planners = anyio.CapacityLimiter(limits.planning_workers)
        self._queued = 0  # touched only on the event loop

    async def args(self, request: Request, verb: str) -> ExtenderArgs | JSONResponse:
        """The parsed body, or a 413/400 that says what is wrong with it. The limit is enforced
        while reading, so an oversized body is never held in memory whole."""
        limit = self.limits.body_limit(len(self.state.objects["nodes"]))
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return _refuse(verb, 413, f"body of {declared} bytes is over the limit of {limit} for this cluster")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _refuse(verb, 413, f"body is over the limit of {limit} bytes for this cluster")
            chunks.append(chunk)
        try:
            return parse_args(b"".join(chunks))
        except MalformedBodyError as error:
            return _refuse(verb, 400, str(error))

    async def call(
        self,
        request: Request,
        verb: str,
        decide: Callable[[PodFacts, list[str]], T],
        answer: Callable[[ExtenderArgs, T | None], tuple[bytes, str]],
    ) -> Response:
        """One call of `verb`, timed and counted by the path it took: the body read and parsed
        under the limits, then answered at once on the fast path (`answer` given no decision, and
        the node names never decoded) or from what `decide` found on a planning worker."""
        started = time.perf_counter()
        with self.watchdog.tracking():
            args = await self.args(request, verb)
            if isinstance(args, JSONResponse):
                return args
            decided: T | None = None
            pod = args.pod  # read once at the wire: every room downstream reads these facts
            if pod.needs_planning:  # else every node passes with a score of 0: answered without the view
                planned = await self.plan(verb, lambda: decide(pod, args.node_names()))
                if isinstance(planned, JSONResponse):
                    return planned
                decided = planned
            body, path = answer(args, decided)
        metrics.REQUESTS.labels(verb, path).inc()
        metrics.SECONDS.labels(verb).observe(time.perf_counter() - started)
        return Response(body, media_type="application/json")

    async def plan(self, verb: str, work: Callable[[], T]) -> T | JSONResponse:
        """`work` on a planning worker; a full queue answers 503 at once (the scheduler retries)
        rather than piling up threads. Cancelled (shutdown), the thread is abandoned."""
        if self._queued >= self.limits.planning_queue:
            metrics.BUSY.labels(verb).inc()
            return JSONResponse({"Error": f"{verb}: extender busy, try again"}, status_code=503)
        self._queued += 1
        try:
            return await anyio.to_thread.run_sync(work, limiter=self._planners, abandon_on_cancel=True)
        finally:
            self._queued -= 1


def _plan_in_background(state: ClusterState, decider: Decider, stop: threading.Event) -> None:
    """Once every kind is listed, the first view and plan (`Decider.warm_up`, which /readyz waits
    for); then the newest view whenever an answer came from an older plan (`CurrentPlan.keep_fresh`)."""
    while state.missing():
        if stop.wait(0.05):
            return
    decider.warm_up(state.view())
    decider.plans.keep_fresh(state.view, stop)


def _add_probes(app: FastAPI, state: ClusterState, decider: Decider, watchdog: Watchdog) -> None:
    @app.get("/healthz")
    async def healthz() -> PlainTextResponse:
        stuck = watchdog.stuck_for()
        if stuck is None:
            return PlainTextResponse("ok")
        return PlainTextResponse(
            f"a request has been in flight for {stuck:.0f}s (limit {watchdog.stuck_after_seconds:.0f}s)",
            status_code=503,
        )

    @app.get("/readyz")
    async def readyz() -> PlainTextResponse:
        missing = state.missing()
        if missing:
            return PlainTextResponse(f"waiting for the first list of: {', '.join(missing)}", status_code=503)
        if not decider.warm.is_set():
            return PlainTextResponse("working out the first plan", status_code=503)
        return PlainTextResponse("ok")

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def create_probe_app(state: ClusterState, decider: Decider, watchdog: Watchdog) -> FastAPI:
    """/healthz, /readyz and /metrics alone, for a plain-HTTP port the kubelet can probe."""
    app = FastAPI(title="nativedra scheduler extender probes", docs_url=None, redoc_url=None)
    _add_probes(app, state, decider, watchdog)
    return app


def create_app(
    state: ClusterState, decider: Decider, limits: RequestLimits | None = None, watchdog: Watchdog | None = None
) -> VerbsFirst:
    """The extender verbs and the probes; `watchdog` is shared with a probe app when there is one."""
    limits = limits or RequestLimits()

    @contextlib.asynccontextmanager
    async def background_planner(_app: FastAPI) -> AsyncIterator[None]:
        """Plans the newest view off the request path while the app serves (see CurrentPlan.keep_fresh)."""
        stop = threading.Event()
        planner = threading.Thread(target=_plan_in_background, args=(state, decider, stop), name="planner", daemon=True)
        planner.start()
        try:
            yield
        finally:
            stop.set()
            decider.plans.refresh_wanted.set()
            planner.join(timeout=5)

    app = FastAPI(title="nativedra scheduler extender", docs_url=None, redoc_url=None, lifespan=background_planner)
    handler = _Handler(state, limits, watchdog or Watchdog(limits.stuck_after_seconds))

    def filter_answer(args: ExtenderArgs, decided: Filtered | None) -> tuple[bytes, str]:
        if decided is None:
            return filter_result(args, None, {}), "fast"
        passing, failed, path = decided
        metrics.REJECTED_NODES.labels(path).inc(len(failed))
        error = next(iter(failed.values()), "") if path == RETRY else ""
        return filter_result(args, passing, {} if error else failed, error), path

    def prioritize_answer(_args: ExtenderArgs, scores: dict[str, int] | None) -> tuple[bytes, str]:
        return encode_priorities(scores or {}), "fast" if scores is None else "scored"

    async def filter_nodes(request: Request) -> Response:
        return await handler.call(
            request, "filter", lambda pod, names: decider.filter(state.view(), pod, names), filter_answer
        )

    async def prioritize(request: Request) -> Response:
        return await handler.call(
            request,
            "prioritize",
            lambda pod, names: decider.prioritize(state.view(), pod, names),
            prioritize_answer,
        )

    # Plain Starlette routes: the handlers read and answer raw bodies, so FastAPI's parameter
    # layer would only add its cost to every scheduling cycle.
    app.router.add_route("/filter", filter_nodes, methods=["POST"])
    app.router.add_route("/prioritize", prioritize, methods=["POST"])
    _add_probes(app, state, decider, handler.watchdog)
    return VerbsFirst(app, {"/filter": filter_nodes, "/prioritize": prioritize})


class VerbsFirst:
    """The extender's verbs answered as the server hands them over, ahead of FastAPI's middleware
    stack (errors, telemetry, body limits, exit stacks, routing: a third of the extender's CPU per
    scheduled pod, sampled at 500 nodes); everything else, the lifespan included, is `app`'s, which
    also routes the verbs (a GET of one is refused there as before)."""

    def __init__(self, app: FastAPI, verbs: dict[str, Callable[[Request], Awaitable[Response]]]) -> None:
        self.app, self.verbs = app, verbs

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        verb = self.verbs.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if verb is None:
            await self.app(scope, receive, send)
            return
        response = await verb(Request(scope, receive))
        await response(scope, receive, send)
