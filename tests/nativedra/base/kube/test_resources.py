"""Each resource reference spells its apiVersion as the API server expects it."""

from __future__ import annotations

from nativedra.base.kube import resources
from nativedra.base.kube.resources import Resource


def test_a_core_resource_has_a_bare_version_and_a_named_group_a_qualified_one() -> None:
    assert Resource("", "v1", "pods", "Pod", namespaced=True).api_version == "v1"
    assert resources.RESOURCE_CLAIMS.api_version == "resource.k8s.io/v1"
    assert resources.JOBSETS.api_version == "jobset.x-k8s.io/v1alpha2"


def test_every_declared_resource_is_a_lowercase_plural_of_its_kind() -> None:
    declared = [value for value in vars(resources).values() if isinstance(value, Resource)]
    assert len(declared) >= 9
    for resource in declared:
        assert resource.plural.startswith(resource.kind.lower()) and resource.plural.islower(), resource
