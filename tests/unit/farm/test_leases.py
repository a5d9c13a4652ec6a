"""Leases: one maker per thing; a waiter takes over from a holder that is gone."""

import subprocess
import sys
import threading
import time
from pathlib import Path

from farm.digest import digest
from farm.leases import lease, owner_alive, process_alive
from farm.leftovers import gone_here, owner_tag, process_tag
from farm.lineage.db import Database
from farm.lineage.record import lease_holder, try_acquire_lease
from farm.settings import Settings


ROOT = Path(__file__).resolve().parents[3]


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
            assert lease_holder(s, digest({"x": 1}))["holder"] == process_tag()
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


def test_a_silent_holder_on_another_host_is_broken_after_the_stale_bound(tmp_path):
    """A lease whose holder (another host: its pid means nothing here) stopped renewing is broken
    once silent past FARM_LEASE_STALE_SECONDS, by the database's clock; under the bound the waiter
    waits (the control)."""
    key = digest({"z": 1})
    res = _Res(tmp_path, lease_heartbeat_seconds=0.5, lease_stale_seconds=2.0)
    with res.db.session() as s:
        assert try_acquire_lease(s, key, "another-host.1", "making z")
    waited = []

    def wait() -> None:
        with lease(_Res(tmp_path, lease_heartbeat_seconds=60, lease_stale_seconds=3600.0), {"z": 1}, "making z",
                   poll_s=0.05):
            waited.append("got it")

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    t.join(1.5)
    assert waited == []  # a 1-hour bound: the holder on another host may still be working
    with res.db.session() as s:
        assert 1.0 < lease_holder(s, key)["silent_s"] < 10
    t0 = time.monotonic()
    with lease(res, {"z": 1}, "making z", poll_s=0.05):
        assert time.monotonic() - t0 < 3


def test_a_live_holder_is_never_broken_however_long_it_works(tmp_path):
    """The heartbeat renews the lease while its block runs: a waiter with a 2 s bound waits out a
    holder that works for 4 bounds, then gets the lease when it is released."""
    holder = _Res(tmp_path, lease_heartbeat_seconds=0.3, lease_stale_seconds=2.0)
    inside = threading.Event()
    order: list[str] = []

    def hold() -> None:
        with lease(holder, {"w": 1}, "making w", poll_s=0.05):
            inside.set()
            time.sleep(8)
            order.append("holder done")

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert inside.wait(10)
    key = digest({"w": 1})
    # Another process (another holder name) waits with the same bound.
    code = ("import sys,time; sys.path[:0]=[%r]\n"
            "from farm.leases import lease; from farm.lineage.db import Database; from farm.settings import Settings\n"
            "class R: pass\n"
            "r=R(); r.db=Database(%r); r.settings=Settings(home=%r, lease_heartbeat_seconds=0.3, lease_stale_seconds=2.0)\n"
            "with lease(r, {'w': 1}, 'making w', poll_s=0.05): print('got it', flush=True)\n") % (
        str(ROOT), f"sqlite:///{tmp_path / 'l.db'}", str(tmp_path))
    waiter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    out, _ = waiter.communicate(timeout=60)
    order.append(out.strip())
    t.join()
    assert order == ["holder done", "got it"]  # never broken while the holder beat
    with holder.db.session() as s:
        assert lease_holder(s, key) is None


def test_the_stale_bound_is_at_least_two_heartbeats():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="at least twice the lease heartbeat"):
        Settings(lease_heartbeat_seconds=30, lease_stale_seconds=45)
    assert Settings(lease_heartbeat_seconds=30, lease_stale_seconds=60).lease_stale_seconds == 60


def test_a_holder_is_one_process_even_where_pids_and_hostnames_repeat(tmp_path):
    """A recreated container has the same hostname and pid 1 as the one that died: its lease holder
    differs (a per-process nonce), so it breaks its predecessor's silent lease rather than waiting on
    it as its own; the pid check alone (the control) would have taken the holder for itself."""
    res = _Res(tmp_path, lease_heartbeat_seconds=0.5, lease_stale_seconds=1.0)
    predecessor = f"{owner_tag()}-deadbeef"  # this host, this very pid, another process
    assert predecessor != process_tag() and not gone_here(predecessor)  # the pid says "alive"
    with res.db.session() as s:
        assert try_acquire_lease(s, digest({"c": 1}), predecessor, "making c")
    t0 = time.monotonic()
    with lease(res, {"c": 1}, "making c", poll_s=0.05):
        assert time.monotonic() - t0 < 5
    assert owner_alive(res, predecessor) is False
    with process_alive(res):
        assert owner_alive(res, process_tag()) is True
