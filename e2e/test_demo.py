"""`nativedra demo` runs non-interactively and its map agrees with the API server."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from kubernetes import client, config

from extender.plan.config import RACK_LABEL
from extender.pods.gang import JOBSET_NAME, LWS_NAME
from nativedra.base.kube.pods import pod_claim_names
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import commands
from nativedra.cluster.controlplane import stop_recorded
from nativedra.demo.workloads import DEMO_NAMESPACE
from nativedra.map.clustermap import read_map

JOB_KEY = "jobset.sigs.k8s.io/job-key"


def test_demo_places_every_example_and_its_map_matches_the_api() -> None:
    state = Path(tempfile.mkdtemp(prefix="nd-demo-", dir="/tmp"))
    try:
        run = subprocess.run(
            commands.nativedra("demo", "--state-dir", str(state)),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        api = config.new_client_from_config(config_file=str(state / "admin.kubeconfig"))
        pods = client.CoreV1Api(api).list_namespaced_pod(DEMO_NAMESPACE).items
        assert len(pods) == 16, "7 example pods, a JobSet of 4, a LeaderWorkerSet group of 2, a gang of 3"
        cluster_map = read_map(api)
        holders = {
            pod: (node.name, gpu.index)
            for node in cluster_map.nodes
            for gpu in node.gpus.values()
            for holding in gpu.holdings
            for pod in holding.pods
        }
        pending = dict(cluster_map.pending)
        claims_in_use = set()
        for pod in pods:
            key = f"{DEMO_NAMESPACE}/{pod.metadata.name}"
            assert pod.metadata.name in run.stdout, f"{key} missing from the printed map"
            if pod.spec.node_name is None:
                assert pending[key], f"{key} is pending without a reason"
                continue
            assert holders[key][0] == pod.spec.node_name, (
                f"map puts {key} on {holders[key]}, API on {pod.spec.node_name}"
            )
            for name in filter(None, pod_claim_names(api.sanitize_for_serialization(pod)).values()):
                claim = RESOURCE_CLAIMS.get(api, name, DEMO_NAMESPACE)
                assert {r["pool"] for r in claim["status"]["allocation"]["devices"]["results"]} == {pod.spec.node_name}
                claims_in_use.add(claim["metadata"]["uid"])
        specs = {p.name.split("_", 1)[1].removesuffix(".yaml") for p in state.glob("nodes/*/cdi/*.yaml")}
        assert specs == claims_in_use, "the kubelet step wrote one CDI spec per claim in use"
        racks = {
            node.metadata.name: node.metadata.labels.get(RACK_LABEL) for node in client.CoreV1Api(api).list_node().items
        }
        train = [pod for pod in pods if (pod.metadata.labels or {}).get(JOBSET_NAME) == "train"]
        assert len(train) == 4 and all(pod.spec.node_name for pod in train), f"JobSet pods pending: {pending}"
        racks_per_job: dict[str, set[str]] = {}
        for pod in train:
            racks_per_job.setdefault(pod.metadata.labels[JOB_KEY], set()).add(racks[pod.spec.node_name])
        assert sorted(map(sorted, racks_per_job.values())) == [["rack-a"], ["rack-b"]], (
            f"one rack per Job: {racks_per_job}"
        )
        serve = [pod for pod in pods if (pod.metadata.labels or {}).get(LWS_NAME) == "serve"]
        assert len(serve) == 2 and all(pod.spec.node_name for pod in serve), f"LWS group pending: {pending}"
        assert all(f"{DEMO_NAMESPACE}/pretrain-{i}" in pending for i in range(3)), "the too-big gang waits whole"
        assert "needs 3 more pod(s) x 4 device(s) in one nativedra.dev/rack" in pending[f"{DEMO_NAMESPACE}/pretrain-0"]
        svg = (state / "cluster-map.svg").read_text()
        assert svg.startswith("<svg") and all(pod.metadata.name in svg for pod in pods if pod.spec.node_name)
    finally:
        stop_recorded(state)
        shutil.rmtree(state, ignore_errors=True)
