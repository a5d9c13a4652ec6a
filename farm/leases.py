"""Make each thing once, however many identical builds ask for it at the same time.

`lease(res, key, purpose)` holds a row of the lineage DB's `leases` table while its block runs: the
first process to insert it makes the thing; the others wait for the row to go and then find the
holder's recorded result (the caller looks again inside the block). The table is in the lineage DB
every worker shares, so this holds across processes and hosts. A waiter breaks a lease whose holder
is a process on this host that is gone (a kill -9), or that is older than the lease TTL
(settings.lease_ttl_seconds, FARM_LEASE_TTL_SECONDS, default 6 h: a holder on another host that
died). Threads of one process hold one lease in turn.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

from farm.digest import digest
from farm.leftovers import owner_tag, pid_alive
from farm.lineage.record import lease_holder, release_lease, try_acquire_lease

log = logging.getLogger(__name__)
_local = threading.Lock()  # threads of one process share a holder name: take turns here first
_held: set[str] = set()


def _gone(holder: str, acquired_at: datetime, ttl: float) -> bool:
    host, _, pid = holder.rpartition(".")
    me_host = owner_tag().rpartition(".")[0]
    if host == me_host and pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
        return True
    if acquired_at.tzinfo is None:  # SQLite drops the zone
        acquired_at = acquired_at.replace(tzinfo=timezone.utc)
    return (datetime.now(timezone.utc) - acquired_at).total_seconds() > ttl


@contextmanager
def lease(res, what: dict, purpose: str, poll_s: float = 0.5) -> Iterator[None]:
    key = digest(what)
    holder = owner_tag()
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
                        and _gone(current["holder"], current["acquired_at"], res.settings.lease_ttl_seconds)):
                    with res.db.session() as s:
                        release_lease(s, key, current["holder"])
                    log.warning("broke the lease of %s (%s): its holder is gone", current["holder"], current["purpose"])
                    continue
            else:
                current = {"holder": holder, "purpose": purpose}
        if not waited:
            log.info("waiting for %s, which is %s", current["holder"] if current else "another process", purpose)
            waited = True
        time.sleep(poll_s)
    try:
        yield
    finally:
        with _local:
            _held.discard(key)
            with res.db.session() as s:
                release_lease(s, key, holder)
