"""A GPU offering MIG placements and fractions at once takes the mode of its first claim."""

from __future__ import annotations

import pytest

from dra_driver.errors import PrepareError
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import devices_and_counters
from tests.dra_driver.claims import INVENTORY, Node, new_claim

BOTH_MODES = {d.name: d for d in devices_and_counters(INVENTORY, PublishConfig(mig_or_fractions=True))[0]}


def test_a_gpu_offering_both_modes_takes_the_mode_of_its_first_claim(node: Node) -> None:
    """MIG placements and fractions of one GPU (compatibility groups): the first claim prepared on
    it sets its mode, a claim needing the other mode is refused while that one holds it, and may
    prepare once it is gone; another GPU is free to take either mode."""
    preparer = node.preparer(published=BOTH_MODES)
    mig = new_claim(node, "mig", devices=("gpu-0-1g-10gb-0",))
    preparer.prepare(mig)
    fraction = new_claim(node, "fraction", devices=("gpu-0-1of2-0",))
    with pytest.raises(PrepareError) as refused:
        preparer.prepare(fraction)
    assert refused.value.reason == "mode_conflict"
    assert "GPU 0 in whole-GPU mode, but claim ns/mig holds it in MIG mode" in str(refused.value)
    assert fraction.uid not in node.checkpoint().read(), "a refused claim leaves no record"
    elsewhere = new_claim(node, "elsewhere", devices=("gpu-1-1of2-0",))
    preparer.prepare(elsewhere)
    preparer.unprepare(mig)
    assert [d.device_name for d in preparer.prepare(fraction)] == ["gpu-0-1of2-0"]


def test_one_claim_cannot_put_a_gpu_in_both_modes(node: Node) -> None:
    preparer = node.preparer(published=BOTH_MODES)
    both = new_claim(node, devices=("gpu-0-1of2-0", "gpu-0-1g-10gb-0"))
    with pytest.raises(PrepareError, match="needs GPU 0 in MIG mode, but claim ns/train holds it in whole-GPU mode"):
        preparer.prepare(both)
