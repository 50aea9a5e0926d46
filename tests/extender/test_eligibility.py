"""Node eligibility by nodeSelector and required node affinity."""

from __future__ import annotations

from extender.eligibility import eligible


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
