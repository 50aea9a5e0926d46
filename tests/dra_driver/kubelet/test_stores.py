"""A prepared claim's files come back from its record; only what is lost (or changed) is written."""

from __future__ import annotations

import dataclasses
import uuid

from dra_driver.kubelet.checkpoint import ClaimState
from dra_driver.kubelet.stores import prepared_count, spec_store
from tests.dra_driver.claims import Node, new_claim


def test_spec_files_are_named_by_the_cdi_vendor_and_class(node: Node) -> None:
    uid = str(uuid.uuid4())
    assert spec_store(node.root).path_for(uid).name == f"k8s.gpu.nativedra.dev-claim_{uid}.yaml"


def test_restore_writes_back_only_lost_or_changed_files(node: Node) -> None:
    ref = new_claim(node)
    node.preparer().prepare(ref)
    stores = node.stores()
    record = stores.checkpoint.read()[ref.uid]
    assert not stores.restore(record), "nothing lost, nothing written"
    node.specs.remove(ref.uid)
    assert stores.restore(record) and node.specs.read_text(ref.uid) == record.cdi_spec
    node.metadata.path_for(ref.uid, "gpus").write_text("edited")
    assert stores.restore(record) and node.metadata.path_for(ref.uid, "gpus").read_text() != "edited"


def test_only_completed_claims_count_as_prepared(node: Node) -> None:
    ref = new_claim(node)
    node.preparer().prepare(ref)
    records = node.checkpoint().read()
    assert prepared_count(records) == 1
    started = dataclasses.replace(records[ref.uid], state=ClaimState.PREPARE_STARTED)
    assert prepared_count({ref.uid: started}) == 0
