"""Node eligibility by nodeSelector and required node affinity; inter-pod (anti-)affinity."""

from __future__ import annotations

from typing import Any

from extender.pods.eligibility import PlacedPods, eligible


def test_eligibility_follows_selector_and_required_affinity() -> None:
    spec = {
        "nodeSelector": {"gpu": "a100"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]},
                        {"matchExpressions": [{"key": "spare", "operator": "Exists"}]},
                    ]
                }
            }
        },
    }
    assert eligible(spec, "n", {"gpu": "a100", "rack": "r2"})
    assert eligible(spec, "n", {"gpu": "a100", "spare": ""})
    assert not eligible(spec, "n", {"gpu": "a100", "rack": "r3"})
    assert not eligible(spec, "n", {"gpu": "h100", "rack": "r1"})
    assert eligible({"nodeName": "elsewhere"}, "n", {}), "a placed sibling's nodeName does not restrict others"


RACKS = {"a": {"rack": "a"}, "b": {"rack": "b"}, "c": {"rack": "c"}, "bare": {}}


def some_pod(
    labels: dict[str, str],
    namespace: str = "ns",
    affinity: list[dict[str, Any]] | None = None,
    anti: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A pod with required pod affinity terms `affinity` and anti-affinity terms `anti`."""
    spec: dict[str, Any] = {"affinity": {}}
    for kind, terms in (("podAffinity", affinity), ("podAntiAffinity", anti)):
        if terms:
            spec["affinity"][kind] = {"requiredDuringSchedulingIgnoredDuringExecution": terms}
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels}, "spec": spec}


def term(match: dict[str, str] | None = None, *expressions: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A term at rack level selecting pods by `match` labels and `expressions`."""
    return {
        "labelSelector": {"matchLabels": match or {}, "matchExpressions": list(expressions)},
        "topologyKey": "rack",
    } | extra


def allowed(placed: dict[str, dict[str, Any]], incoming: dict[str, Any]) -> set[str]:
    """Which of RACKS the incoming pod may use, with `placed` (rack -> pod) on them."""
    affinity = PlacedPods((pod, RACKS[rack]) for rack, pod in placed.items()).of(incoming)
    return {name for name, labels in RACKS.items() if affinity.allows(labels)}


def test_anti_affinity_refuses_a_rack_holding_a_matching_pod() -> None:
    web = some_pod({"app": "web"})
    assert allowed({"a": web}, some_pod({}, anti=[term({"app": "web"})])) == {"b", "c", "bare"}
    assert allowed({"a": web}, some_pod({}, anti=[term({"app": "db"})])) == set(RACKS), "no matching pod"


def test_affinity_keeps_a_pod_in_the_rack_of_its_peer() -> None:
    placed = {"a": some_pod({"app": "db"}), "b": some_pod({"app": "cache"})}
    assert allowed(placed, some_pod({}, affinity=[term({"app": "db"})])) == {"a"}
    both = [term({"app": "db"}), term({"app": "cache"})]
    assert allowed(placed, some_pod({}, affinity=both)) == set(), "a peer counts only if it matches every term"


def test_the_first_pod_of_a_group_with_affinity_to_itself_may_start_anywhere_labelled() -> None:
    first = some_pod({"app": "db"}, affinity=[term({"app": "db"})])
    assert allowed({}, first) == {"a", "b", "c"}, "any node with the topology label"
    assert allowed({}, some_pod({}, affinity=[term({"app": "db"})])) == set(), "it does not match its own term"
    assert allowed({"b": some_pod({"app": "db"})}, first) == {"b"}, "once one is placed, the rest join it"


def test_namespaces_of_a_term() -> None:
    placed = {"a": some_pod({"app": "web"}, namespace="ns"), "b": some_pod({"app": "web"}, namespace="other")}
    own = term({"app": "web"})
    assert allowed(placed, some_pod({}, anti=[own])) == {"b", "c", "bare"}, "no namespaces: its own namespace"
    assert allowed(placed, some_pod({}, anti=[own | {"namespaces": ["other"]}])) == {"a", "c", "bare"}
    everywhere = {"c", "bare"}
    assert allowed(placed, some_pod({}, anti=[own | {"namespaceSelector": {}}])) == everywhere
    labelled = own | {"namespaceSelector": {"matchLabels": {"team": "x"}}}
    assert allowed(placed, some_pod({}, anti=[labelled])) == everywhere, "not evaluable: every namespace"


def test_selector_operators_and_a_missing_selector() -> None:
    placed = {"a": some_pod({"tier": "gpu", "app": "x"}), "b": some_pod({"app": "y"})}
    cases: dict[str, tuple[dict[str, Any], set[str]]] = {
        "In": ({"key": "app", "operator": "In", "values": ["x"]}, {"b", "c", "bare"}),
        "NotIn": ({"key": "app", "operator": "NotIn", "values": ["x"]}, {"a", "c", "bare"}),
        "Exists": ({"key": "tier", "operator": "Exists"}, {"b", "c", "bare"}),
        "DoesNotExist": ({"key": "tier", "operator": "DoesNotExist"}, {"a", "c", "bare"}),
    }
    for operator, (expression, expected) in cases.items():
        assert allowed(placed, some_pod({}, anti=[term(None, expression)])) == expected, operator
    assert allowed(placed, some_pod({}, anti=[{"topologyKey": "rack"}])) == set(RACKS), "no labelSelector: no pod"


def test_a_placed_pods_anti_affinity_refuses_the_pods_it_matches() -> None:
    loner = some_pod({"app": "loner"}, anti=[term({"app": "web"})])
    assert allowed({"a": loner}, some_pod({"app": "web"})) == {"b", "c", "bare"}
    assert allowed({"a": loner}, some_pod({"app": "db"})) == set(RACKS)


def jobset_leader(job_key: str) -> dict[str, Any]:
    """A Job's leader as JobSet's webhook writes exclusive placement: affinity to its own Job,
    anti-affinity to every other Job, in all namespaces."""
    key = "jobset.sigs.k8s.io/job-key"
    own = {"key": key, "operator": "In", "values": [job_key]}
    others = ({"key": key, "operator": "Exists"}, {"key": key, "operator": "NotIn", "values": [job_key]})
    return some_pod(
        {key: job_key},
        affinity=[term(None, own, namespaceSelector={})],
        anti=[term(None, *others, namespaceSelector={})],
    )


def test_jobset_leaders_affinities_place_each_job_alone_in_a_rack() -> None:
    placed = {"a": jobset_leader("job-1")}
    assert allowed(placed, jobset_leader("job-2")) == {"b", "c"}, "a rack of its own, not the other Job's"
    assert allowed(placed, jobset_leader("job-1")) == {"a"}, "the rest of job-1 joins its leader"
    assert allowed({"a": jobset_leader("job-1"), "b": jobset_leader("job-2")}, jobset_leader("job-3")) == {"c"}
