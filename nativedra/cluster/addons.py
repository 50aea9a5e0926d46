"""The JobSet, LeaderWorkerSet and Kueue controllers, built from their Go modules and run on loopback
with their own CRDs and admission webhooks: where another project defines the behaviour, the local
cluster runs that project's code, never objects shaped like its output.

Each controller is built once into `~/.cache/nativedra/addons/<name>/<version>/bin`. Its CRDs and
webhook configurations come from the downloaded module's `config/` directory; the webhooks are
rewritten to call `https://127.0.0.1:<port>/<path>` with the local cluster's CA, and the controller
serves them with the apiserver's loopback certificate (its SANs include 127.0.0.1). Kueue runs
with the one Configuration of `nativedra.cluster.kueue_config` (its gates and why are said there);
its CRDs' conversion webhooks (v1beta1 <-> v1beta2) are pointed at the controller once it serves.
"""

from __future__ import annotations

import base64
import copy
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from nativedra.cluster import kueue_config
from nativedra.cluster.controlplane import ControlPlane, ControlPlaneError, free_port
from nativedra.cluster.gobuild import BuildLock, build_programs, cache_root, download, fetch_go_mod, go_env
from nativedra.cluster.processes import RecordedProcess, alive, tail
from nativedra.objects import apply_documents

READY_TIMEOUT_S = 60.0
PORT_ATTEMPTS = 3  # controller starts with fresh ports when its own were taken meanwhile
JsonPatch = list[dict[str, Any]]


@dataclass(frozen=True)
class Addon:
    name: str
    module: str
    version: str
    main_package: str
    config_api_version: str
    crd_dirs: tuple[str, ...]  # relative to the module's source
    webhook_dir: str  # a kustomize directory: manifests.yaml + JSON6902 or inline strategic patches
    # CRDs (by name) whose kustomization turns on the conversion webhook at /convert
    conversion_crds: tuple[str, ...] = ()

    @property
    def binary(self) -> str:
        return f"{self.name}-controller"


JOBSET = Addon(
    name="jobset",
    module="sigs.k8s.io/jobset",
    version="v0.12.0",
    main_package="sigs.k8s.io/jobset",
    config_api_version="config.jobset.x-k8s.io/v1alpha1",
    crd_dirs=("config/components/crd/bases",),
    webhook_dir="config/components/webhook",
)
LWS = Addon(
    name="lws",
    module="sigs.k8s.io/lws",
    version="v0.9.0",
    main_package="sigs.k8s.io/lws/cmd",
    config_api_version="config.lws.x-k8s.io/v1alpha1",
    # v0.9.0's manager also runs the DisaggregatedSet controller, which needs its CRD.
    crd_dirs=("config/crd/bases",),
    webhook_dir="config/webhook",
)
KUEUE = Addon(
    name="kueue",
    module="sigs.k8s.io/kueue",
    version=kueue_config.kueue_version(),
    main_package="sigs.k8s.io/kueue/cmd/kueue",
    config_api_version=kueue_config.CONFIG_API_VERSION,
    crd_dirs=("config/components/crd/bases",),
    webhook_dir="config/components/webhook",
    # config/components/crd/kustomization.yaml: patches/webhook_in_<plural>.yaml
    conversion_crds=(
        "localqueues.kueue.x-k8s.io",
        "clusterqueues.kueue.x-k8s.io",
        "cohorts.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
        "multikueueclusters.kueue.x-k8s.io",
    ),
)
ADDONS = {addon.name: addon for addon in (JOBSET, LWS, KUEUE)}


def _home(addon: Addon) -> Path:
    return cache_root() / "addons" / addon.name / addon.version


def source(addon: Addon) -> Path:
    """The module's source in Go's module cache (downloaded once)."""
    return Path(download(addon.module, addon.version, _home(addon) / "src", go_env())["Dir"])


def build_addon(addon: Addon) -> Path:
    """The controller binary, built once from the module proxy."""
    binary = _home(addon) / "bin" / addon.binary
    if binary.is_file():
        return binary
    with BuildLock(_home(addon)):
        if not binary.is_file():
            src, env = _home(addon) / "src", go_env()
            upstream = fetch_go_mod(addon.module, addon.version, src, env)
            go_mod = f"module nativedra.dev/addonbuild\n\ngo 1.24\n\nrequire {addon.module} {addon.version}\n"
            programs = {addon.binary: addon.main_package}
            build_programs(src, go_mod, programs, binary.parent, env=env, upstream=upstream)
    return binary


def crds(addon: Addon, root: Path) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for directory in addon.crd_dirs:
        for path in sorted((root / directory).glob("*.yaml")):
            documents.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return documents


def json_patch(document: dict[str, Any], operations: JsonPatch) -> dict[str, Any]:
    """Apply RFC 6902 add/replace/remove operations (what kubebuilder's webhook patches use). Pure."""
    result = copy.deepcopy(document)
    for operation in operations:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]]
        target: Any = result
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        op = operation["op"]
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if op == "add":
                target.insert(index, operation["value"])
            elif op == "replace":
                target[index] = operation["value"]
            elif op == "remove":
                del target[index]
            else:
                raise ValueError(f"unsupported JSON patch op {op!r}")
        elif op in ("add", "replace"):
            target[last] = operation["value"]
        elif op == "remove":
            del target[last]
        else:
            raise ValueError(f"unsupported JSON patch op {op!r}")
    return result


def webhook_configurations(addon: Addon, root: Path, url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The upstream webhook configurations with their kustomize patches applied, each webhook
    calling `url` + its path, trusted through `ca_bundle`, renamed per addon (JobSet and LWS both
    call theirs `mutating-webhook-configuration`). Pure apart from reading the files."""
    directory = root / addon.webhook_dir
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    documents = [d for d in yaml.safe_load_all((directory / "manifests.yaml").read_text()) if d]
    for patch in kustomization.get("patches") or []:
        if "patch" in patch:  # inline strategic merge (Kueue): the target is the patch's own kind and name
            inline = yaml.safe_load(patch["patch"])
            documents = [
                kueue_config.strategic_webhook_patch(d, inline)
                if (d["kind"], d["metadata"]["name"]) == (inline["kind"], inline["metadata"]["name"])
                else d
                for d in documents
            ]
            continue
        target = patch["target"]
        operations = yaml.safe_load((directory / patch["path"]).read_text())
        documents = [
            json_patch(d, operations) if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"] else d
            for d in documents
        ]
    if kustomization.get("replacements"):  # Kueue v0.19: one namespaceSelector copied to every webhook
        documents = kueue_config.webhook_replacements(documents, kustomization["replacements"])
    encoded = base64.b64encode(ca_bundle).decode()
    for document in documents:
        document["metadata"]["name"] = f"nativedra-{addon.name}-{document['metadata']['name']}"
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"{url}{path}", "caBundle": encoded}
    return documents


def conversions(addon: Addon, root: Path, url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The CRDs whose conversion webhook the upstream kustomization enables, calling `url`."""
    wanted = set(addon.conversion_crds)
    if not wanted:
        return []
    encoded = base64.b64encode(ca_bundle).decode()
    return [
        {**crd, "spec": {**crd["spec"], "conversion": kueue_config.conversion_webhook(url, encoded)}}
        for crd in crds(addon, root)
        if crd["metadata"]["name"] in wanted
    ]


def controller_config(addon: Addon, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    common = {
        "apiVersion": addon.config_api_version,
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }
    return kueue_config.configuration(common, addon.version) if addon.name == KUEUE.name else common


class AddonExitedError(ControlPlaneError):
    """The controller exited before it was ready."""


def _wait(probe: Any, what: str, process: RecordedProcess) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not alive(process.pid):
            raise AddonExitedError(f"{what} exited during start-up; log:\n{tail(process.log)}")
        try:
            if probe():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise ControlPlaneError(f"{what} not ready after {READY_TIMEOUT_S:.0f}s; log:\n{tail(process.log)}")


def kueue_metrics_certificate(cert: Path, key: Path, directory: Path = kueue_config.METRICS_CERT_DIR) -> None:
    """Kueue v0.17 loads a metrics serving certificate from a fixed path whenever its internal
    certificate management is off (cmd/kueue/main.go), even with metrics disabled, and exits
    without one. Any valid pair will do (no metrics listener runs): one already there is kept (another
    local cluster's), else this cluster's loopback pair is copied there, atomically."""
    if (directory / "tls.crt").is_file() and (directory / "tls.key").is_file():
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for source_file, name in ((key, "tls.key"), (cert, "tls.crt")):
            partial = directory / f".{name}.{os.getpid()}"
            shutil.copyfile(source_file, partial)
            partial.replace(directory / name)
    except OSError as error:
        raise ControlPlaneError(
            f"Kueue {KUEUE.version} needs a certificate at {directory}/tls.crt and tls.key (read at start even "
            f"with metrics off) and {directory} could not be written ({error}); create it once as root, "
            f"e.g. copy any serving certificate and key there"
        ) from error


def start_addon(plane: ControlPlane, api: client.ApiClient, addon: Addon) -> None:
    """Build (once), install the CRDs, run the controller with its webhooks on loopback, and
    register the webhooks once they answer."""
    binary, root = build_addon(addon), source(addon)
    definitions = crds(addon, root)
    apply_documents(api, definitions)
    _wait_established(api, [d["metadata"]["name"] for d in definitions])
    home = plane.state_dir / "addons" / addon.name
    cert_dir = home / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plane.layout.certs.serving_cert, cert_dir / "tls.crt")
    shutil.copyfile(plane.layout.certs.serving_key, cert_dir / "tls.key")
    if addon is KUEUE:
        kueue_metrics_certificate(cert_dir / "tls.crt", cert_dir / "tls.key")
    ca = plane.layout.certs.ca_cert
    context = ssl.create_default_context(cafile=str(ca))
    for attempt in range(1, PORT_ATTEMPTS + 1):
        # A port free_port() found free can still be taken before the controller binds it (by
        # another process: free_port keeps clear of outgoing connections' range): then new ports.
        webhook_port, health_port = free_port(), free_port()
        config_path = home / "config.yaml"
        config_path.write_text(yaml.safe_dump(controller_config(addon, webhook_port, health_port, cert_dir)))
        process = plane.spawn(
            f"{addon.name}-controller",
            binary,
            [f"--config={config_path}", f"--kubeconfig={plane.kubeconfig}", "--zap-log-level=info"],
        )

        def healthy(port: int = health_port) -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                return bool(response.status == 200)

        url = f"https://127.0.0.1:{webhook_port}"
        configurations = webhook_configurations(addon, root, url, ca.read_bytes()) + conversions(
            addon, root, url, ca.read_bytes()
        )
        paths = sorted({w["clientConfig"]["url"] for d in configurations for w in d.get("webhooks") or []})

        def serving_webhooks(paths: list[str] = paths) -> bool:
            """Every path has its handler: the controller serves TLS before it registers them
            (JobSet waits for its certificates first), and a path without one answers 404, which
            the apiserver turns into a 500 for every create."""
            return all(_registered(path, context) for path in paths)

        try:
            _wait(healthy, f"the {addon.name} controller", process)
            _wait(serving_webhooks, f"the {addon.name} webhooks", process)
            break
        except AddonExitedError as error:
            plane.supervisor.stop(process.name)
            if attempt == PORT_ATTEMPTS or "address already in use" not in str(error):
                raise
    apply_documents(api, configurations)


def _wait_established(api: client.ApiClient, names: list[str]) -> None:
    """Until the apiserver serves every CRD: a controller started before exits on "no matches for
    kind" (Kueue sets up its indexes first thing)."""
    extensions = client.ApiextensionsV1Api(api)

    def established(name: str) -> bool:
        crd = extensions.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = list(names)
    while waiting:
        waiting = [name for name in waiting if not established(name)]
        if waiting and time.monotonic() > deadline:
            raise ControlPlaneError(f"CRDs not established after {READY_TIMEOUT_S:.0f}s: {', '.join(waiting)}")
        if waiting:
            time.sleep(0.2)


def _registered(url: str, context: ssl.SSLContext) -> bool:
    request = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context):
            return True
    except urllib.error.HTTPError as error:
        return error.code != 404


def stop_addon(plane: ControlPlane, api: client.ApiClient, addon: Addon) -> None:
    """Unregister the controller's webhooks, then stop it: a plane shared with later tests must not
    keep webhooks (failurePolicy Fail) that nothing answers. Its CRDs and objects stay."""
    admission = client.AdmissionregistrationV1Api(api)
    prefix = f"nativedra-{addon.name}-"
    for item in admission.list_mutating_webhook_configuration().items:
        if item.metadata.name.startswith(prefix):
            admission.delete_mutating_webhook_configuration(item.metadata.name)
    for item in admission.list_validating_webhook_configuration().items:
        if item.metadata.name.startswith(prefix):
            admission.delete_validating_webhook_configuration(item.metadata.name)
    plane.supervisor.stop(f"{addon.name}-controller")
