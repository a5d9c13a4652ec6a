"""farm/ops/server.py's stop path: a process counts as gone only once it no longer runs."""

import os
import signal
import subprocess
import sys

from farm.ops.server import _gone, _wait_gone


def test_a_running_process_is_not_gone_and_a_killed_one_is():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not _gone(proc.pid)  # the control: alive is never "gone"
        os.kill(proc.pid, signal.SIGKILL)
        _wait_gone(proc.pid, 5.0)
        assert _gone(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_a_zombie_that_another_process_must_reap_is_gone():
    """The server's runner is nobody's child by the time a new server stops it: killed, it may stay a
    zombie until its parent reaps it, holding no port; kill(pid, 0) still answers for it."""
    script = ("import os, signal, subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print(child.pid, flush=True)\n"
              "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert not _gone(pid)
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 5.0)
        os.kill(pid, 0)  # still answers: a zombie, not reaped (its parent sleeps)
        assert _gone(pid)
    finally:
        parent.kill()
        parent.wait()
