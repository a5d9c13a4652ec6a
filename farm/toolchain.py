"""The orchestrator's side of the toolchain protocol (see farm_toolchain/protocol.py).

The toolchain env (torch, litert-torch, the quantizer, the builder, the runtime) cannot share a
resolver solution with prefect, so it is its own venv, created from toolchain/requirements.txt under
$FARM_CACHE/toolchains/<digest of the lock>/ and reused by every FARM_HOME. Each call runs
`python -m farm_toolchain <command>` with a JSON request on stdin; stderr is streamed line by line to
a progress callback while it runs; the result is one JSON object on stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from farm.errors import BadInput, BuildFailed
from farm.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCK_FILE = REPO_ROOT / "toolchain" / "requirements.txt"
READY_MARKER = ".farm-toolchain-ready"

Progress = Callable[[str], None]


def _stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def lock_digest() -> str:
    return hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()


class Toolchain:
    def __init__(self, settings: Settings):
        self.settings = settings

    @property
    def env_dir(self) -> Path:
        return self.settings.cache / "toolchains" / lock_digest()[:16]

    @property
    def python(self) -> Path:
        if self.settings.toolchain_python:
            return self.settings.toolchain_python
        return self.env_dir / "bin" / "python"

    def is_installed(self) -> bool:
        if self.settings.toolchain_python:
            return self.settings.toolchain_python.exists()
        return (self.env_dir / READY_MARKER).exists()

    def install(self, progress: Progress = _stderr_progress) -> Path:
        """Create the toolchain venv from the lock (idempotent; about a minute the first time)."""
        if self.is_installed():
            return self.python
        env = self.env_dir
        progress(f"creating toolchain env {env} from {LOCK_FILE.name}")
        subprocess.run([_base_python(), "-m", "venv", "--clear", str(env)], check=True)
        subprocess.run(
            [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(LOCK_FILE)],
            check=True,
        )
        (env / READY_MARKER).write_text(lock_digest() + "\n")
        return self.python

    def _require(self) -> None:
        if not self.is_installed():
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
        """Run one toolchain command. Bad input -> BadInput, any other failure -> BuildFailed; the
        error names the command and the toolchain's own one-line reason."""
        self._require()
        progress = progress or _stderr_progress
        env = dict(os.environ)
        # Only the repo root goes on the path, for farm_toolchain; it never imports farm or prefect.
        env["PYTHONPATH"] = str(REPO_ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        proc = subprocess.Popen(
            [str(self.python), "-m", "farm_toolchain", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(REPO_ROOT),
        )
        tail: deque[str] = deque(maxlen=30)

        def pump() -> None:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode(errors="replace").rstrip()
                if line:
                    tail.append(line)
                    progress(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        started = time.monotonic()
        timed_out = threading.Event()

        def kill_on_timeout() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout, kill_on_timeout) if timeout else None
        try:
            if timer:
                timer.start()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
            # Only stdout is read here: stderr belongs to the pump thread (communicate() would
            # read it too and close it under the thread).
            out = proc.stdout.read()
            proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            if timer:
                timer.cancel()
            reader.join(timeout=10)
        if timed_out.is_set():
            raise BuildFailed(f"toolchain {command} timed out after {timeout:.0f}s")
        try:
            result = json.loads(out.decode().strip().splitlines()[-1])
        except (IndexError, ValueError):
            last = tail[-1] if tail else "no output"
            raise BuildFailed(
                f"toolchain {command} exited {proc.returncode} without a result: {last}"
            ) from None
        if not result.get("ok"):
            msg = f"{command}: {result.get('error', 'failed')}"
            if result.get("error_kind") == "bad_input":
                raise BadInput(msg)
            raise BuildFailed(msg)
        result["_seconds"] = round(time.monotonic() - started, 3)
        return result

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


def code_digest() -> str:
    """sha256 over farm_toolchain's source files (path and bytes), in a stable order."""
    h = hashlib.sha256()
    pkg = REPO_ROOT / "farm_toolchain"
    for p in sorted(pkg.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(p.relative_to(pkg).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _base_python() -> str:
    """A plain interpreter to create the toolchain venv with (not the orchestrator venv's)."""
    return getattr(sys, "_base_executable", None) or sys.executable
