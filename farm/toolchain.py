"""The orchestrator's side of the toolchain protocol (see farm_toolchain/protocol.py).

The toolchain env (torch, litert-torch, the quantizer, the builder, the runtime) cannot share a
resolver solution with prefect, so it is its own venv, created from toolchain/requirements.txt under
$FARM_CACHE/toolchains/<digest of the lock>/ and reused by every FARM_HOME. Each call runs
`python -m farm_toolchain <command>` with a JSON request on stdin; stderr is streamed line by line to
a progress callback while it runs; the result is one JSON object on stdout.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from functools import cached_property
from pathlib import Path
from typing import Any

from farm.errors import BadInput, BuildFailed
from farm.settings import Settings
from farm.progress import Progress, stderr_progress
from farm_common import commands
from farm_common.wire import DONE_MARKER, BadInput as WireBadInput, Reply, proc_status_bytes

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCK_FILE = REPO_ROOT / "toolchain" / "requirements.txt"
NODEPS_FILE = REPO_ROOT / "toolchain" / "requirements-nodeps.txt"
READY_MARKER = ".farm-toolchain-ready"

RUNTIME_PACKAGES = ("litert-lm", "litert-lm-api", "litert-lm-builder")  # released together, pinned together


def lock_text(runtime: str | None = None) -> str:
    """The toolchain lock; with `runtime`, the same lock with the litert-lm runtime at that version
    (a variant env for `farm gate --runtime`, so a file can be re-validated on another release)."""
    text = LOCK_FILE.read_text()
    if runtime is None:
        return text
    if not re.fullmatch(r"\d+(\.\d+){1,3}([a-z]+\d+)?", runtime):
        raise BadInput(f"runtime version {runtime!r} is not a version number like 0.18.0")
    lines = []
    for line in text.splitlines():
        name = line.split("==")[0].strip().lower()
        lines.append(f"{name}=={runtime}" if name in RUNTIME_PACKAGES else line)
    return "\n".join(lines) + "\n"


def lock_digest(runtime: str | None = None) -> str:
    return hashlib.sha256(lock_text(runtime).encode() + NODEPS_FILE.read_bytes()).hexdigest()


class Toolchain:
    def __init__(self, settings: Settings, runtime: str | None = None):
        self.settings = settings
        self.runtime = runtime
        self._lock = threading.Lock()
        self._server: _Server | None = None
        atexit.register(self.close)

    @property
    def env_dir(self) -> Path:
        return self.settings.cache / "toolchains" / lock_digest(self.runtime)[:16]

    @property
    def _external(self) -> bool:
        """FARM_TOOLCHAIN_PYTHON names the main toolchain; runtime variants are always ours."""
        return bool(self.settings.toolchain_python) and self.runtime is None

    @property
    def python(self) -> Path:
        if self._external:
            return self.settings.toolchain_python
        return self.env_dir / "bin" / "python"

    def is_installed(self) -> bool:
        if self._external:
            return self.settings.toolchain_python.exists()
        return (self.env_dir / READY_MARKER).exists()

    def install(self, progress: Progress = stderr_progress) -> Path:
        """Create the toolchain venv from the lock (idempotent; about a minute the first time). One
        process installs an env at a time (a file lock beside it): two farms asking for the same
        runtime variant at once would otherwise pip-install into one folder while `venv --clear`
        empties it; the second waits and finds it ready."""
        import fcntl

        if self.is_installed():
            return self.python
        self.env_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.env_dir.with_name(self.env_dir.name + ".install-lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if self.is_installed():  # made by the process we waited for
                    return self.python
                return self._install(progress)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _install(self, progress: Progress) -> Path:
        env = self.env_dir
        if self.runtime is not None:
            return self._install_variant(progress)
        log = self._pip_log()
        progress(f"creating toolchain env {env} from {LOCK_FILE.name} (a minute or two; pip's output: {log})")
        subprocess.run([_base_python(), "-m", "venv", "--clear", str(env)], check=True)
        lock = env / "requirements.lock"
        lock.write_text(lock_text(self.runtime))
        done = _pip([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(lock)], log)
        if done == 0:
            done = _pip([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "-r",
                         str(NODEPS_FILE)], log)
        if done != 0:
            raise BuildFailed(f"installing the toolchain env {env} failed (pip exit {done}): {_last_error(log)} "
                              f"(pip's whole output: {log})")
        (env / READY_MARKER).write_text(lock_digest(self.runtime) + "\n")
        return self.python

    def _install_variant(self, progress: Progress) -> Path:
        """A runtime variant: the lock's own env underneath (a .pth file puts its site-packages after
        the variant's own), and only the runtime packages, pinned to the variant's version, installed
        into the variant (by the base env's pip, so the variant carries no pip or setuptools of its
        own to shadow the lock's). The lock pins every other package, so this is the env a full
        install of the variant's lock makes: measured, the same `pip freeze` digest, in ~5 s instead
        of ~90 s (a venv resolving and copying ~90 packages)."""
        env = self.env_dir
        base = Toolchain(self.settings)
        base_python = base.install(progress)
        progress(f"creating toolchain env {env}: litert-lm {self.runtime} over {base.env_dir}")
        subprocess.run([_base_python(), "-m", "venv", "--clear", "--without-pip", str(env)], check=True)
        site = _site_packages(env)
        (site / "farm-toolchain-base.pth").write_text(str(_site_packages(base_python.parent.parent)) + "\n")
        (env / "requirements.lock").write_text(lock_text(self.runtime))
        pins = [f"{name}=={self.runtime}" for name in RUNTIME_PACKAGES]
        log = self._pip_log()
        done = _pip([str(base_python), "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--quiet",
                     "--no-deps", *pins], log)
        if done != 0:
            raise BuildFailed(f"installing litert-lm {self.runtime} into {env} failed (pip exit {done}): "
                              f"{_last_error(log)}: is that release on the package index? (pip's output: {log})")
        (env / READY_MARKER).write_text(lock_digest(self.runtime) + "\n")
        return self.python

    def _pip_log(self) -> Path:
        """Where pip's output goes (hundreds of lines, e.g. an index's 'Location … is ignored'
        warnings): a file under FARM_HOME/logs, named on the terminal's one progress line."""
        import time

        folder = self.settings.home / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"pip-{self.env_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"

    def require(self) -> None:
        if self.runtime is not None and not self.is_installed():
            self.install()  # asked for explicitly (`farm gate --runtime`): install it on first use
        if not self.is_installed():
            if self._external:
                raise BadInput(f"FARM_TOOLCHAIN_PYTHON {self.settings.toolchain_python} does not exist: point it "
                               "at the toolchain env's python, or unset it to use the one `make toolchain` installs")
            raise BuildFailed(
                f"toolchain env not installed at {self.env_dir}: run `make toolchain` "
                "(or `farm toolchain install`), or point FARM_TOOLCHAIN_PYTHON at one"
            )

    def call(
        self,
        command: str,
        request: dict[str, Any],
        progress: Progress | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run one toolchain command in this process's toolchain server (started on first use).
        Bad input -> BadInput, any other failure -> BuildFailed; the error names the command and
        the toolchain's own one-line reason. The request and the result are checked against the
        command's contract (farm_common/commands.py) on this side as the toolchain checks them on its."""
        try:
            commands.check_request(command, request)
        except WireBadInput as exc:
            raise BadInput(str(exc)) from None
        self.require()
        started = time.monotonic()
        deadline = self.settings.build_deadline
        if deadline is not None:
            left = deadline - time.time()
            if left <= 0:
                raise BuildFailed(f"the build ran past its time limit (--max-minutes) before toolchain {command} "
                                  "started: give it more minutes, or build on a faster host")
            timeout = left if timeout is None else min(timeout, left)
        cap = int(self.settings.max_memory_gb * 2**30) if self.settings.max_memory_gb else None
        with self._lock:
            if self._server is None or not self._server.alive():
                self._server = _Server(self.python)
            server = self._server
            try:
                reply = server.request(command, request, progress or stderr_progress, timeout, cap,
                                        limited=deadline is not None)
            except BaseException:
                server.kill()
                self._server = None
                raise
            if reply is None:  # the server died mid-request (a crash, the OOM killer)
                self._server = None
                server.kill()
                last = server.tail[-1] if server.tail else "no output"
                raise BuildFailed(f"toolchain {command} died (exit {server.proc.poll()}): {last}")
        if not reply.ok:
            msg = f"{command}: {reply.error or 'failed'}"
            if reply.error_kind == "bad_input":
                raise BadInput(msg)
            raise BuildFailed(msg)
        result = reply.fields
        try:
            commands.check_result(command, result)
        except commands.BadResult as exc:
            raise BuildFailed(f"the toolchain broke its contract: {exc}") from None
        result["_seconds"] = round(time.monotonic() - started, 3)
        return result

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.close()
                self._server = None

    @cached_property
    def identity(self) -> dict[str, Any]:
        """What lineage records as "the toolchain": the env's exact versions plus the digest of the
        farm_toolchain adapter code, since a change to either can change the bytes a stage makes.
        `freeze_sha256` here is the digest of both, and it is part of every stage's cache key."""
        v = dict(self.versions)
        code = code_digest()
        v["packages"] = {**v["packages"], "farm_toolchain": code[:16]}
        v["freeze"] = f"{v['freeze']}\n# farm_toolchain code sha256 {code}\n"
        v["freeze_sha256"] = hashlib.sha256(v["freeze"].encode()).hexdigest()
        return v

    @cached_property
    def versions(self) -> dict[str, Any]:
        """Exact versions of the toolchain env: {python, packages, freeze, freeze_sha256}."""
        return self.call("versions", {}, progress=lambda _l: None)


class _Server:
    """One `python -m farm_toolchain serve` process: requests in order, stderr streamed as progress."""

    def __init__(self, python: Path):
        env = dict(os.environ)
        # Only the repo root goes on the path, for farm_toolchain; it never imports farm or prefect.
        env["PYTHONPATH"] = str(REPO_ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        # One hash seed in every toolchain process: litert-torch 0.10.0's Gemma 4 export iterates
        # something in hash order, so the same inputs gave different bytes from run to run
        # (tiny Gemma 4: `farm rebuild` gave MATCH, 15f4a25b…, c7a8e6ad…, ae763bd4…; with a fixed
        # seed four rebuilds in a row gave MATCH). Other families' bytes do not depend on it.
        env["PYTHONHASHSEED"] = "0"
        self.proc = subprocess.Popen(
            [str(python), "-m", "farm_toolchain", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(REPO_ROOT),
        )
        self.tail: deque[str] = deque(maxlen=30)
        self._progress: Progress = stderr_progress
        self._done = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line == DONE_MARKER:
                self._done.set()
            elif line:
                self.tail.append(line)
                self._progress(line)
        self._done.set()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, command: str, request: dict, progress: Progress, timeout: float | None,
                memory_cap: int | None = None, limited: bool = False) -> Reply | None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._progress = progress
        self._done.clear()
        timed_out = threading.Event()
        over: list[int] = []
        finished = threading.Event()

        def expire() -> None:
            timed_out.set()
            self.kill()

        def watch_memory() -> None:
            # Polled, not an rlimit: RLIMIT_AS counts the address space torch reserves and would
            # fail allocations at random; resident memory is what the OOM killer acts on.
            while not finished.wait(0.25):
                rss = _rss(self.proc.pid)
                if rss is not None and rss > memory_cap:
                    over.append(rss)
                    self.kill()
                    return

        timer = threading.Timer(timeout, expire) if timeout else None
        watcher = threading.Thread(target=watch_memory, daemon=True) if memory_cap else None
        try:
            if timer:
                timer.start()
            if watcher:
                watcher.start()
            self.proc.stdin.write((json.dumps({"command": command, "request": request}) + "\n").encode())
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = b""
        finally:
            finished.set()
            if timer:
                timer.cancel()
        if over:
            raise BuildFailed(f"toolchain {command} reached {over[0] / 2**30:.1f} GiB resident, over the build's "
                              f"{memory_cap / 2**30:.1f} GiB memory cap (--max-memory-gb / FARM_MAX_MEMORY_GB): "
                              "stopped before the kernel's OOM killer would pick a process; build on a host with "
                              "more memory")
        if timed_out.is_set():
            if limited:
                raise BuildFailed(f"the build ran past its time limit (--max-minutes) in toolchain {command}: "
                                  "stopped; give it more minutes, or build on a faster host")
            raise BuildFailed(f"toolchain {command} timed out after {timeout:.0f}s")
        if not line:
            return None
        self._done.wait(timeout=10)  # the request's last progress lines
        self._progress = stderr_progress
        try:
            return Reply.parse(line)
        except ValueError:  # a line that is not a reply
            return None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            self.kill()


# The code the toolchain process runs besides the env's packages: its own, and what it shares with
# the orchestrator (the gates' settings, the registry).
TOOLCHAIN_CODE = ("farm_toolchain", "farm_common")


def code_digest() -> str:
    """sha256 over the toolchain's source files (path and bytes), in a stable order."""
    h = hashlib.sha256()
    for name in TOOLCHAIN_CODE:
        for p in sorted((REPO_ROOT / name).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(p.relative_to(REPO_ROOT).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _site_packages(env: Path) -> Path:
    """An env's site-packages folder (lib/pythonX.Y/site-packages)."""
    found = sorted((env / "lib").glob("python3.*/site-packages"))
    if not found:
        raise BuildFailed(f"{env} has no lib/python3.*/site-packages: is it a virtual env?")
    return found[0]


def _pip(argv: list[str], log: Path) -> int:
    with open(log, "ab") as out:
        return subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode


def _last_error(log: Path) -> str:
    """pip's own reason for a failure: its last ERROR line (else its last line)."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no output"
    errors = [line for line in lines if line.startswith("ERROR")]
    return ((errors or lines or ["no output"])[-1])[:300]


def _base_python() -> str:
    """A plain interpreter to create the toolchain venv with (not the orchestrator venv's)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def _rss(pid: int) -> int | None:
    """A process's resident memory (VmRSS), None once it is gone."""
    return proc_status_bytes("VmRSS", pid)
