"""The HTTP face of the extender: /filter, /prioritize, /healthz, /readyz, /metrics."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from extender import metrics
from extender.decide import Decider
from extender.state import ClusterState
from extender.wire import ExtenderArgs, HostPriority, filter_result

log = logging.getLogger(__name__)


async def _args(request: Request, verb: str) -> ExtenderArgs | JSONResponse:
    """The parsed body, or a 400 that says what is wrong with it."""
    body = await request.body()
    try:
        return ExtenderArgs.model_validate(json.loads(body))
    except json.JSONDecodeError as error:
        reason = f"{verb}: body is not JSON: {error}"
    except ValidationError as error:
        issue = error.errors()[0]
        reason = f"{verb}: field {'.'.join(map(str, issue['loc']))!r}: {issue['msg']}"
    metrics.BAD_REQUESTS.labels(verb).inc()
    log.warning("rejected malformed %s call: %s", verb, reason)
    return JSONResponse({"Error": reason}, status_code=400)


def create_app(state: ClusterState, decider: Decider) -> FastAPI:
    app = FastAPI(title="nativedra scheduler extender", docs_url=None, redoc_url=None)

    @app.post("/filter")
    async def filter_nodes(request: Request) -> Any:
        started = time.perf_counter()
        args = await _args(request, "filter")
        if isinstance(args, JSONResponse):
            return args
        names = args.node_names()

        def decide() -> tuple[list[str], dict[str, str], str]:
            return decider.filter(state.view(), args.Pod, names)

        passing, failed, path = await run_in_threadpool(decide)
        metrics.REQUESTS.labels("filter", path).inc()
        metrics.REJECTED_NODES.labels(path).inc(len(failed))
        metrics.SECONDS.labels("filter").observe(time.perf_counter() - started)
        return filter_result(args, passing, failed).model_dump()

    @app.post("/prioritize")
    async def prioritize(request: Request) -> Any:
        started = time.perf_counter()
        args = await _args(request, "prioritize")
        if isinstance(args, JSONResponse):
            return args
        names = args.node_names()
        scores = await run_in_threadpool(lambda: decider.prioritize(state.view(), args.Pod, names))
        metrics.REQUESTS.labels("prioritize", "scored").inc()
        metrics.SECONDS.labels("prioritize").observe(time.perf_counter() - started)
        return [HostPriority(Host=name, Score=scores.get(name, 0)).model_dump() for name in names]

    @app.get("/healthz")
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/readyz")
    async def readyz() -> PlainTextResponse:
        missing = state.missing()
        if not missing:
            return PlainTextResponse("ok")
        return PlainTextResponse(f"waiting for the first list of: {', '.join(missing)}", status_code=503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
