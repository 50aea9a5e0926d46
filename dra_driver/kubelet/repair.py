"""Start-up repair: after a crash or a reboot, the checkpoint and the files on the node agree
again before the kubelet's first call. Completed claims get their files back, half-prepared ones
are rolled back, a spec whose record was lost (corrupted checkpoint) gets its record rebuilt from
the file and the API while its claim is allocated here, and only files of claims not allocated
here are deleted: a spec without a record is deleted only if the API says so.

That is only right while no other plugin process works on the node: during a rolling update the
old pod still prepares claims as the new one starts. The repair waits until the other processes
have gone (`dra_driver.live_instances`), then runs with this process's own claim work paused."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from dra_driver import metrics
from dra_driver.errors import PrepareError
from dra_driver.kubelet.cdi_edits import metadata_device_name
from dra_driver.kubelet.checkpoint import ClaimRecord, ClaimState
from dra_driver.kubelet.claim import ClaimRef, our_results
from dra_driver.kubelet.prepare import ClaimPreparer
from dra_driver.kubelet.stores import prepared_count

log = logging.getLogger(__name__)
RETRY_S = 5.0  # how often a deferred repair looks whether the other processes have gone


def _no_other_process() -> list[str]:
    return []


def reconcile(
    preparer: ClaimPreparer,
    others: Callable[[], list[str]] = _no_other_process,
    hold: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
) -> dict[str, list[str]]:
    """Repair the state `preparer` works on, unless `others` names live plugin processes (asked
    under the checkpoint's lock, which a process takes to decide before it serves), with `hold`
    held while files and records change (not while the API is asked); returns what was done, for
    logs and tests, with `deferred_for` naming the processes that kept it from it."""
    stores = preparer.stores
    done: dict[str, list[str]] = {
        "restored": [],
        "rolled_back": [],
        "rebuilt": [],
        "orphans_removed": [],
        "deferred_for": [],
    }
    if stale := stores.specs.remove_stale_temporaries():
        log.info("start-up repair: removed temporary CDI spec files left by a crash: %s", stale)
    unrecorded = stores.specs.claim_uids() - set(stores.checkpoint.read())
    allocated = _allocated_here(preparer, unrecorded)  # the API is asked outside the checkpoint lock

    def repair(records: dict[str, ClaimRecord]) -> int:
        if alive := others():
            done["deferred_for"] = alive
            return prepared_count(records)
        for uid, record in list(records.items()):
            if record.state is ClaimState.PREPARE_COMPLETED:
                if stores.restore(record):
                    done["restored"].append(uid)
            else:
                stores.specs.remove(uid)
                stores.metadata.remove(uid)
                del records[uid]
                done["rolled_back"].append(uid)
        for uid, claim in (allocated or {}).items():
            if uid not in records and (rebuilt := _rebuilt(preparer, claim)) is not None:
                records[uid] = rebuilt
                stores.restore(rebuilt)
                done["rebuilt"].append(uid)
        keep = set(records) | (unrecorded if allocated is None else set(allocated))  # no record rebuilt: files stay
        # Metadata without a spec and a record was never answered (or its spec went with a
        # reboot, and then the kubelet prepares the claim again).
        orphans = set(stores.specs.remove_orphans(keep)) | set(stores.metadata.remove_orphans(keep))
        done["orphans_removed"] = sorted(orphans)
        return prepared_count(records)

    with hold():
        metrics.PREPARED_CLAIMS.set(stores.checkpoint.update(repair))
    if done["deferred_for"]:
        log.info("start-up repair deferred: plugin processes %s still work on this node", done["deferred_for"])
    elif any(done.values()):
        log.info("start-up repair: %s", done)
    return done


def repair_when_alone(preparer: ClaimPreparer, others: Callable[[], list[str]], stop: threading.Event) -> None:
    """The deferred repair: once no other process is alive, with this one's claim work paused
    (its half-done claims are not crash leftovers). A failure is logged and tried again."""
    while not stop.wait(RETRY_S):
        try:
            if not others() and not reconcile(preparer, others, hold=preparer.paused)["deferred_for"]:
                return
        except Exception:  # the repair must not end for good on one failure
            log.exception("deferred start-up repair failed; trying again in %.0f s", RETRY_S)


def _allocated_here(preparer: ClaimPreparer, uids: set[str]) -> dict[str, dict[str, Any]] | None:
    """Those of `uids` whose claim is allocated to this node by this driver (from the API);
    None when the API cannot say, so that nothing is deleted on a guess."""
    if not uids:
        return {}
    try:
        claims = preparer.sources.list_all()
    except PrepareError as error:
        log.warning("start-up repair: %s; keeping every CDI spec without a record", error)
        return None
    found = {}
    for claim in claims:
        metadata = claim.get("metadata", {})
        ref = ClaimRef(metadata.get("namespace", ""), metadata.get("uid", ""), metadata.get("name", ""))
        if ref.uid not in uids:
            continue
        try:
            our_results(claim, ref, preparer.node.name)
        except PrepareError:
            continue  # not (or no longer) allocated here: its spec is an orphan
        found[ref.uid] = claim
    return found


def _rebuilt(preparer: ClaimPreparer, claim: dict[str, Any]) -> ClaimRecord | None:
    """The record of a claim whose spec is on disk but not in the checkpoint (it was lost or
    corrupted): the answer and the metadata files are derived again from the claim (as prepare
    writes them), the spec text is the file's. A spec written before device metadata existed
    mounts none, so the answer then names none."""
    identity = claim["metadata"]
    ref = ClaimRef(identity["namespace"], identity["uid"], identity["name"])
    try:
        plan = preparer.plan(claim, ref)
        text = preparer.stores.specs.read_text(ref.uid)
        mounted = [m for m in plan.metadata if metadata_device_name(ref.uid, m.request) in text]
        plan = dataclasses.replace(plan, metadata=mounted)
    except (PrepareError, OSError) as error:
        log.warning("start-up repair: cannot rebuild the record of %s (%s); its CDI spec is kept", ref, error)
        return None
    answer = [a.__dict__ for a in preparer.answer(ref.uid, plan)]
    documents = {m.request: m.document for m in plan.metadata}
    return ClaimRecord(ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_COMPLETED, answer, text, documents)
