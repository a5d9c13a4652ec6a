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


class _Res:
    def __init__(self, tmp_path):
        self.db = Database(f"sqlite:///{tmp_path / 'l.db'}")


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
