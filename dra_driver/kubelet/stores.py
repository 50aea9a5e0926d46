"""The plugin's prepare state on the node: the checkpoint of prepared claims, each claim's CDI spec
and its device metadata files. The checkpoint is the record; the files are derived from it, so a
prepared claim whose files are lost gets them back from its record."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from cdi.store import SpecStore
from dra_driver.kubelet.checkpoint import Checkpoint, ClaimRecord, ClaimState
from dra_driver.kubelet.device_metadata import render
from dra_driver.kubelet.metadata_store import MetadataStore
from nativedra.base.kube.names import CDI_CLASS, CDI_VENDOR

log = logging.getLogger(__name__)


def spec_store(cdi_dir: Path) -> SpecStore:
    """The store of the plugin's per-claim CDI specs in `cdi_dir`."""
    return SpecStore(cdi_dir, CDI_VENDOR, CDI_CLASS)


@dataclass(frozen=True)
class Stores:
    checkpoint: Checkpoint
    specs: SpecStore
    metadata: MetadataStore

    def restore(self, record: ClaimRecord) -> bool:
        """Put back the files of a prepared claim that are lost (or not as recorded); True if any was."""
        restored = False
        if record.cdi_spec and not self.specs.exists(record.uid):
            log.info("restoring the CDI spec of prepared claim %s/%s", record.namespace, record.name)
            self.specs.write_text(record.uid, record.cdi_spec)
            restored = True
        files = {request: render(document) for request, document in record.metadata.items()}
        if files and self.metadata.restore(record.uid, files):
            log.info("restoring the device metadata of prepared claim %s/%s", record.namespace, record.name)
            restored = True
        return restored


def prepared_count(records: dict[str, ClaimRecord]) -> int:
    """Prepared claims, for the gauge; counted inside the checkpoint update that changed them."""
    return sum(1 for record in records.values() if record.state is ClaimState.PREPARE_COMPLETED)
