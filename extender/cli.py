"""`nativedra extender`: the scheduler extender as an HTTPS service.

HTTPS with client-certificate verification is the default: the extender's answers decide where
pods run, so only the scheduler (holding a certificate from --client-ca-file) may ask. Plain HTTP
needs --insecure-http, meant for a loopback-only local control plane. Probes and metrics can be
served on a separate plain-HTTP --probe-port, since the kubelet's HTTPS probes present no client
certificate. The three TLS files are re-read when they change (nativedra/base/certs/tls_reload.py), so
certificates rotate without a restart. A verified chain is not enough: the certificate must also name
one of --client-identities (extender/serve/client_identity.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
import uvloop
from kubernetes.client import ApiClient
from starlette.types import ASGIApp

from extender.cluster.informer import DEFAULT_NAMESPACE, run_informer
from extender.cluster.state import ClusterState
from extender.devices.cel_eval import Selectors
from extender.plan.capacity import Matcher
from extender.plan.config import ConfigError, load_config
from extender.plan.current import CurrentPlan
from extender.plan.decide import Decider
from extender.preempt.leader import LeaderLease
from extender.preempt.preemptor import LEADER_LEASE, Preemption, identity
from extender.recover.returns import LEADER_LEASE as RETURNS_LEADER_LEASE
from extender.recover.returns import Returns
from extender.serve.app import RequestLimits, create_app, create_probe_app
from extender.serve.cert_expiry import ExpiryWatch, api_warning_poster, pod_from_env
from extender.serve.client_identity import DEFAULT_IDENTITIES, AcceptedClients, identity_checked, parse_identities
from extender.serve.health import Watchdog
from extender.serve.metrics import CLIENTS_REFUSED
from nativedra.base.certs.tls_reload import ReloadingTls, TlsFileError, TlsFiles
from nativedra.base.cmdline.flags import add_flag
from nativedra.base.gcutil.collector import space_out_collections
from nativedra.base.kube.client import api_client

log = logging.getLogger(__name__)


def _yes(text: str) -> bool:
    """A boolean flag's environment value: NATIVEDRA_INSECURE_HTTP=false must mean false."""
    return text.strip().lower() in ("1", "true", "yes", "on")


def _tls(args: argparse.Namespace) -> dict[str, Any] | str:
    """uvicorn's TLS settings, or why the flags do not make a safe listener."""
    files = {"--tls-cert-file": args.tls_cert_file, "--tls-key-file": args.tls_key_file}
    files["--client-ca-file"] = args.client_ca_file
    if args.insecure_http:
        given = [flag for flag, path in files.items() if path]
        return {} if not given else f"--insecure-http cannot be combined with {', '.join(given)}"
    missing = [flag for flag, path in files.items() if not path]
    if missing:
        return f"{', '.join(missing)} required (or --insecure-http for a loopback-only local setup)"
    return {
        "ssl_certfile": str(args.tls_cert_file),
        "ssl_keyfile": str(args.tls_key_file),
        "ssl_ca_certs": str(args.client_ca_file),
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }


def _server(
    app: ASGIApp, args: argparse.Namespace, port: int, reloading: ReloadingTls | None = None, **extra: Any
) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        host=args.address,
        port=port,
        log_level="warning",
        access_log=False,
        limit_concurrency=args.max_connections,
        timeout_graceful_shutdown=args.shutdown_grace_seconds,
        **extra,
    )
    if reloading is not None:
        # uvicorn loads the files once (and checks its settings); the server then listens with the
        # reloading context instead, whose handshakes follow the files (nativedra/base/certs/tls_reload.py),
        # and keeps a verified connection only from an accepted identity.
        config.load()
        config.ssl = reloading.context
        accepted = AcceptedClients(args.client_identities)
        config.http_protocol_class = identity_checked(config.http_protocol_class, accepted, _client_refused)
    return uvicorn.Server(config)


def _client_refused(reason: str, peer: object) -> None:
    CLIENTS_REFUSED.inc()
    log.warning("closed the connection from %s: %s", peer, reason)


def _watch_certificates(args: argparse.Namespace, api: ApiClient, stop: threading.Event) -> ReloadingTls:
    """Serving TLS that follows its files, its expiry gauges, and a thread that warns before expiry
    (raises TlsFileError when the files cannot serve at all)."""
    files = TlsFiles(args.tls_cert_file, args.tls_key_file, args.client_ca_file)
    pod = pod_from_env()
    if pod is None:
        log.info("NATIVEDRA_POD_NAME/NATIVEDRA_POD_NAMESPACE unset: certificate expiry is logged, not posted as events")
    watch = ExpiryWatch(files, args.certificate_warning_days, api_warning_poster(api, pod) if pod else None)
    reloading = ReloadingTls(files, on_load=watch.loaded)
    threading.Thread(target=watch.run, args=(reloading.refresh, stop), name="certificate-expiry", daemon=True).start()
    return reloading


async def _serve(servers: list[uvicorn.Server]) -> None:
    """Serve until every server is done. Once all listen, log the addresses they got: with
    --port 0 the kernel picks the port, and this line is where a caller reads it."""
    serving = [asyncio.ensure_future(server.serve()) for server in servers]
    while not all(server.started for server in servers):
        if any(task.done() for task in serving):
            break  # one failed to start: gather says how
        await asyncio.sleep(0.02)
    else:
        log.info("extender serving on %s", ", ".join(_address(server) for server in servers))
    await asyncio.gather(*serving)


def _address(server: uvicorn.Server) -> str:
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    return f"{host}:{port}"


def _run(args: argparse.Namespace) -> int:
    tls = _tls(args)
    if isinstance(tls, str):
        print(f"nativedra extender: {tls}", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"nativedra extender: {error}", file=sys.stderr)
        return 2
    space_out_collections()
    api = api_client(args.kubeconfig)
    state = ClusterState(config.driver)
    stop = threading.Event()
    try:
        reloading = _watch_certificates(args, api, stop) if tls else None
    except TlsFileError as error:
        print(f"nativedra extender: {error}", file=sys.stderr)
        return 2
    for kind in ClusterState.KINDS:
        threading.Thread(
            target=run_informer,
            args=(api, state, kind, stop),
            kwargs={"namespace": args.namespace},
            name=f"watch-{kind}",
            daemon=True,
        ).start()
    limits = RequestLimits(planning_workers=args.planning_workers, stuck_after_seconds=args.stuck_request_seconds)
    watchdog = Watchdog(limits.stuck_after_seconds)
    matcher = Matcher(Selectors(), config.driver)
    plans = CurrentPlan(config, matcher)
    decider = Decider(config, matcher, plans)
    if config.preemption:
        leader = LeaderLease(api, args.namespace, LEADER_LEASE, identity())
        preemption = Preemption(api, state, config, plans=plans, namespace=args.namespace, leader=leader)
        threading.Thread(target=preemption.run, args=(stop,), name="preemption", daemon=True).start()
    # Always: with returnHoldSeconds 0 it writes nothing and lets records left from before go.
    returns_leader = LeaderLease(api, args.namespace, RETURNS_LEADER_LEASE, identity())
    returns = Returns(api, state, config, plans=plans, namespace=args.namespace, leader=returns_leader)
    threading.Thread(target=returns.run, args=(stop,), name="returns", daemon=True).start()
    servers = [_server(create_app(state, decider, limits, watchdog), args, args.port, reloading, **tls)]
    if args.probe_port:
        servers.append(_server(create_probe_app(state, decider, watchdog), args, args.probe_port))

    def stopped(signum: int, frame: FrameType | None) -> None:
        """Each uvicorn server hands SIGTERM on to the handler it found when it is done: this one."""
        stop.set()

    signal.signal(signal.SIGTERM, stopped)
    log.info(
        "extender listening on %s:%d over %s (topology levels: %s)",
        args.address,
        args.port,
        "HTTPS with client certificates" if tls else "plain HTTP",
        ", ".join(config.topology_levels),
    )
    # uvloop, as `uvicorn.run` picks (and the in-process benchmark measured): on asyncio's own loop,
    # a profile behind the scheduler showed its Python TLS writes and cross-thread wake-ups taking
    # 3.5 times the samples of the decisions themselves.
    uvloop.run(_serve(servers))
    stop.set()
    busy = [t.name for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    if busy:
        # Planning threads cannot be interrupted and would hold the process past the grace period;
        # nothing they compute outlives the process (state is rebuilt from the API), so leave them.
        log.warning("abandoning %d in-flight planning thread(s) at shutdown", len(busy))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    extender = subcommands.add_parser(
        "extender",
        help="run the scheduler extender (gang placement, topology domains, scoring)",
        description="HTTPS extender for kube-scheduler: /filter, /prioritize, /healthz, /readyz, /metrics. "
        "Configure the scheduler with nodeCacheCapable: true, managedResources naming nativedra.dev/extender "
        "(ignoredByScheduler: true) beside the policy that marks pods with it (manifests/scheduler/), "
        "a profile 'nativedra' with percentageOfNodesToScore: 100 that the second policy there moves those pods "
        "to, enableHTTPS: true and a tlsConfig whose client certificate "
        "--client-ca-file signed.",
    )
    add_flag(extender, "--kubeconfig", type=Path, help="kubeconfig file; default: in-cluster service account")
    add_flag(
        extender,
        "--port",
        type=int,
        default=8888,
        help="port of the extender verbs (HTTPS unless --insecure-http); 0: one the kernel picks, logged once bound",
    )
    add_flag(extender, "--address", default="0.0.0.0", help="listen address")  # noqa: S104 - a Service fronts it
    add_flag(extender, "--config", type=Path, help="YAML: topologyLevels, planTimeoutSeconds, weights")
    add_flag(extender, "--tls-cert-file", type=Path, help="serving certificate (PEM)")
    add_flag(extender, "--tls-key-file", type=Path, help="serving certificate's key (PEM)")
    add_flag(extender, "--client-ca-file", type=Path, help="CA that signed the scheduler's client certificate")
    add_flag(
        extender,
        "--client-identities",
        type=parse_identities,
        default=parse_identities(DEFAULT_IDENTITIES),
        help="comma-separated names the scheduler's client certificate must carry as its subject CN or "
        f"a DNS or URI SAN; a certificate of the CA naming none is refused (default {DEFAULT_IDENTITIES})",
    )
    add_flag(
        extender,
        "--certificate-warning-days",
        type=float,
        default=30.0,
        help="a Warning event (CertificateExpiringSoon) on the extender's Pod, at start and then daily, "
        "when the serving certificate or a client CA expires within this many days",
    )
    add_flag(
        extender,
        "--insecure-http",
        type=_yes,
        nargs="?",
        const=True,
        default=False,
        help="serve plain HTTP without client authentication (loopback-only local setups)",
    )
    add_flag(extender, "--probe-port", type=int, help="plain-HTTP port for /healthz, /readyz, /metrics only")
    add_flag(
        extender,
        "--namespace",
        default=os.environ.get("NATIVEDRA_POD_NAMESPACE") or DEFAULT_NAMESPACE,
        help="the extender's own namespace: its preemption Leases live there (default: its Pod's namespace)",
    )
    add_flag(extender, "--max-connections", type=int, default=64, help="connections beyond this get 503")
    add_flag(extender, "--planning-workers", type=int, default=4, help="threads that plan gangs and claims")
    add_flag(
        extender,
        "--stuck-request-seconds",
        type=float,
        default=60.0,
        help="/healthz fails while a request has been in flight longer than this",
    )
    add_flag(
        extender,
        "--shutdown-grace-seconds",
        type=int,
        default=5,
        help="on SIGTERM, in-flight requests get this long before they are abandoned",
    )
    extender.set_defaults(handler=_run)
