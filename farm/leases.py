"""Make each thing once, however many identical builds ask for it at the same time, on any host.

`lease(res, what, purpose)` holds a row of the lineage DB's `leases` table while its block runs: the
first process to insert it makes the thing; the others wait for the row to go and then find the
holder's recorded result (the caller looks again inside the block). The table is in the lineage DB
every host shares, so this holds across processes and hosts.

While the block runs, a heartbeat thread renews the row every `lease_heartbeat_seconds`
(FARM_LEASE_HEARTBEAT_SECONDS, default 20 s), with the database's clock. A waiter breaks a lease
that has been silent for `lease_stale_seconds` (FARM_LEASE_STALE_SECONDS, default 120 s) — a holder
whose host died, was killed or lost the database — whatever its host, and at once one whose holder
is a process of this host that is gone (a kill -9). A live holder is never broken, however long its
stage takes: its heartbeat goes on. Threads of one process hold one lease in turn.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from farm.digest import digest
from farm.leftovers import gone_here, process_tag
from farm.lineage.record import lease_holder, release_lease, renew_lease, try_acquire_lease

log = logging.getLogger(__name__)
_local = threading.Lock()  # threads of one process share a holder name: take turns here first
_held: set[str] = set()


def _gone(holder: str, silent_s: float, stale_s: float) -> bool:
    return gone_here(holder) or silent_s > stale_s


def _heartbeat(res, key: str, holder: str, every_s: float, stop: threading.Event) -> None:
    """Renew the lease until `stop`; a renewal that fails (a database hiccup) is retried next beat."""
    while not stop.wait(every_s):
        try:
            with res.db.session() as s:
                if not renew_lease(s, key, holder):
                    log.warning("lease %s… was broken while held (silent past %ss?): another holder may make "
                                "the same thing", key[:12], res.settings.lease_stale_seconds)
                    return
        except Exception as exc:  # noqa: BLE001 - a lost beat is not the work's failure
            log.warning("lease heartbeat failed (%s); retrying", str(exc).splitlines()[0][:200])


@contextmanager
def lease(res, what: dict, purpose: str, poll_s: float = 0.5) -> Iterator[None]:
    key = digest(what)
    holder = process_tag()
    waited = False
    while True:
        with _local:
            if key not in _held:
                with res.db.session() as s:
                    if try_acquire_lease(s, key, holder, purpose):
                        _held.add(key)
                        break
                    current = lease_holder(s, key)
                if (current is not None and current["holder"] != holder
                        and _gone(current["holder"], current["silent_s"], res.settings.lease_stale_seconds)):
                    with res.db.session() as s:
                        release_lease(s, key, current["holder"])
                    log.warning("broke the lease of %s (%s): silent %.0f s, its holder is gone", current["holder"],
                                current["purpose"], current["silent_s"])
                    continue
            else:
                current = {"holder": holder, "purpose": purpose}
        if not waited:
            log.info("waiting for %s, which is %s", current["holder"] if current else "another process", purpose)
            waited = True
        time.sleep(poll_s)
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(res, key, holder, res.settings.lease_heartbeat_seconds, stop),
                            name=f"lease-heartbeat-{key[:8]}", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join(timeout=5)
        with _local:
            _held.discard(key)
            with res.db.session() as s:
                release_lease(s, key, holder)


def _alive_key(owner: str) -> dict:
    return {"alive": owner}


@contextmanager
def process_alive(res) -> Iterator[None]:
    """Hold this process's liveness lease while its block runs (a top-level flow run): what another
    host reads to tell that a run left `Running` here is dead (`owner_alive`)."""
    with lease(res, _alive_key(process_tag()), "a farm process at work"):
        yield


def owner_alive(res, owner: str) -> bool:
    """Whether the process `owner` (a process tag) still beats: its liveness lease is held and not
    silent past the stale bound (and, on this host, its pid lives)."""
    if gone_here(owner):
        return False
    with res.db.session() as s:
        current = lease_holder(s, digest(_alive_key(owner)))
    return current is not None and current["holder"] == owner and current["silent_s"] <= res.settings.lease_stale_seconds


def forget(res, owner: str) -> None:
    """Drop the liveness lease of a process found dead (`owner_alive` False): nobody waits on it."""
    with res.db.session() as s:
        release_lease(s, digest(_alive_key(owner)), owner)
