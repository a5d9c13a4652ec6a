"""Leases: one maker per thing; a waiter takes over from a holder that is gone."""

import subprocess
import sys
import threading
import time

from farm.digest import digest
from farm.leases import lease
from farm.leftovers import owner_tag
from farm.lineage.db import Database
from farm.lineage.record import lease_holder, try_acquire_lease
from farm.settings import Settings


class _Res:
    def __init__(self, tmp_path, **settings):
        self.db = Database(f"sqlite:///{tmp_path / 'l.db'}")
        self.settings = Settings(home=tmp_path, **settings)


def test_a_lease_of_a_dead_holder_is_broken(tmp_path):
    res = _Res(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = f"{owner_tag().rpartition('.')[0]}.{int(dead.stdout)}"  # this host, a pid that has exited
    with res.db.session() as s:
        assert try_acquire_lease(s, digest({"x": 1}), holder, "making x")
    t0 = time.monotonic()
    with lease(res, {"x": 1}, "making x"):
        with res.db.session() as s:
            assert lease_holder(s, digest({"x": 1}))["holder"] == owner_tag()
    assert time.monotonic() - t0 < 5
    with res.db.session() as s:
        assert lease_holder(s, digest({"x": 1})) is None


def test_threads_of_one_process_take_turns(tmp_path):
    res = _Res(tmp_path)
    inside, overlap = [], []

    def work():
        with lease(res, {"y": 1}, "making y", poll_s=0.05):
            if inside:
                overlap.append(True)
            inside.append(1)
            time.sleep(0.3)
            inside.pop()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == []


def test_a_silent_holder_on_another_host_is_presumed_dead_after_the_settings_ttl(tmp_path):
    """FARM_LEASE_TTL_SECONDS reaches the lease through Settings; under the TTL the waiter waits."""
    key = digest({"z": 1})
    res = _Res(tmp_path, lease_ttl_seconds=1.0)
    with res.db.session() as s:
        assert try_acquire_lease(s, key, "another-host.1", "making z")
    waited = []

    def wait() -> None:
        with lease(_Res(tmp_path, lease_ttl_seconds=3600.0), {"z": 1}, "making z", poll_s=0.05):
            waited.append("got it")

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    t.join(1.5)
    assert waited == []  # a 1-hour TTL: the holder on another host may still be working
    t0 = time.monotonic()
    with lease(res, {"z": 1}, "making z", poll_s=0.05):
        assert time.monotonic() - t0 < 3
