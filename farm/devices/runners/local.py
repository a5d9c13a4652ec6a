"""This host: the real `litert-lm` CLI from the toolchain venv, as a subprocess (the orchestrator never
imports litert). Found next to the toolchain python: Path(toolchain_python).parent / "litert-lm".

The bundle is hard-linked (copied across filesystems) into a private work folder, because
`--cache disk` writes its compile cache next to the model and the store must stay untouched. Each run
gets a private HOME (the CLI writes under $HOME/.litert-lm), stdin=/dev/null (`run` blocks on a TTY),
a time limit and an exact peak RSS (os.wait4 in the wrapper, see base.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from farm.devices.protocol import BenchProtocol
from farm.devices.runners.base import (
    ENV_SCRIPT,
    WRAPPER,
    DeviceError,
    Runner,
    RunOutput,
    litert_lm_argv,
    split_wrapper_output,
)
from farm.devices.runners.registry import RUNNERS


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def default_toolchain_python() -> Path:
    from farm.settings import Settings
    from farm.toolchain import Toolchain

    return Toolchain(Settings()).python


class LocalRunnerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local"]
    # Default: the `litert-lm` next to the toolchain python (Path(toolchain_python).parent / "litert-lm").
    litert_lm_path: Path | None = None
    work_dir: Path | None = None  # where bundles are linked/copied and HOMEs made; default a temp dir


@RUNNERS.register("local", config=LocalRunnerConfig, this_host=True)
class LocalRunner(Runner):
    def __init__(self, device: Any, toolchain_python: str | os.PathLike | None = None):
        super().__init__(device, toolchain_python=toolchain_python)
        cfg = device.runner
        if getattr(cfg, "litert_lm_path", None):
            self.litert_lm = Path(cfg.litert_lm_path)
        else:
            tc = Path(toolchain_python) if toolchain_python else default_toolchain_python()
            self.litert_lm = tc.parent / "litert-lm"
        self._configured_work = Path(cfg.work_dir) if getattr(cfg, "work_dir", None) else None
        self._work: Path | None = None

    @property
    def work(self) -> Path:
        if self._work is None:
            if self._configured_work is not None:
                self._configured_work.mkdir(parents=True, exist_ok=True)
                self._work = Path(tempfile.mkdtemp(prefix="run-", dir=self._configured_work))
            else:
                self._work = Path(tempfile.mkdtemp(prefix="litertlm-farm-local-"))
        return self._work

    def push(self, local_path: str | os.PathLike, sha256: str) -> str:
        src = Path(local_path)
        if not src.is_file():
            raise DeviceError(f"bundle {src} does not exist")
        bundles = self.work / "bundles"
        bundles.mkdir(parents=True, exist_ok=True)
        dest = bundles / f"{sha256}.litertlm"
        if not dest.exists():
            part = dest.with_name(dest.name + ".part")
            part.unlink(missing_ok=True)
            try:
                os.link(src, part)
            except OSError:
                shutil.copyfile(src, part)
            part.rename(dest)
        got = file_sha256(dest)
        if got != sha256:
            dest.unlink(missing_ok=True)
            raise DeviceError(f"pushed bundle {dest} has sha256 {got}, expected {sha256}")
        return str(dest)

    def run(self, remote_path: str, protocol: BenchProtocol, accelerator: str) -> RunOutput:
        if not self.litert_lm.exists():
            raise DeviceError(f"litert-lm CLI not found at {self.litert_lm} (is the toolchain env installed?)")
        argv = litert_lm_argv(str(self.litert_lm), remote_path, protocol, accelerator)
        spec = {
            "argv": argv, "cwd": str(self.work), "home_parent": str(self.work / "home"),
            "timeout_s": protocol.timeout_s, "min_free_kb": protocol.min_free_kb, "env": self.run_env(),
        }
        with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
            timed_out_outer, code = False, None
            try:
                code = subprocess.run([sys.executable, "-c", WRAPPER, json.dumps(spec)], stdin=subprocess.DEVNULL,
                                      stdout=fo, stderr=fe, timeout=protocol.timeout_s + 60).returncode
            except subprocess.TimeoutExpired:
                timed_out_outer = True
            fo.seek(0)
            fe.seek(0)
            stdout = fo.read().decode("utf-8", errors="replace")
            stderr = fe.read().decode("utf-8", errors="replace")
        return _from_wrapper(stdout, stderr, argv, timed_out_outer, code)

    runs_gates = True  # this host's own class: gates run in the toolchain process itself

    def presentation(self, res: Any, host: Any) -> dict[str, Any] | None:
        return None

    def run_env(self) -> dict[str, str]:
        """What the benchmark process's environment adds (a CPU class runner presents its class)."""
        return {}

    def cleanup(self, remote_path: str | None = None) -> None:
        if remote_path is not None:
            p = Path(remote_path)
            for q in [p, *p.parent.glob(p.name + "_*.xnnpack_cache")]:
                q.unlink(missing_ok=True)
            return
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None

    def env(self) -> dict[str, Any]:
        try:
            cp = subprocess.run([sys.executable, "-c", ENV_SCRIPT, str(self.litert_lm)], stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=180, env={**os.environ, **self.run_env()})
            facts = json.loads(cp.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
            raise DeviceError(f"could not read this host's facts: {e}") from None
        facts["runner"] = "local"
        facts["litert_lm_path"] = str(self.litert_lm)
        return facts


def _from_wrapper(stdout: str, stderr: str, argv: list[str], timed_out_outer: bool,
                  wrapper_exit: int | None = None) -> RunOutput:
    stderr, info = split_wrapper_output(stderr)
    if info is None:
        # The wrapper itself died (kill -9 of the remote command, a host going down): say how it ended.
        how = ""
        if wrapper_exit is not None and wrapper_exit < 0:
            how = f" (killed by signal {-wrapper_exit}{' SIGKILL' if wrapper_exit == -9 else ''})"
        elif wrapper_exit == 255:  # ssh: the remote command was killed (ssh names no signal) or the session dropped
            how = " (ssh exit 255: the remote command was killed, e.g. SIGKILL, or the connection dropped)"
        elif wrapper_exit is not None:
            how = f" (exit {wrapper_exit}{': killed by signal ' + str(wrapper_exit - 128) if 128 < wrapper_exit < 160 else ''})"
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        return RunOutput(stdout, stderr, None, None, 0.0, timed_out_outer, command=argv,
                         transport_error=None if timed_out_outer else f"the run wrapper ended without reporting{how}; "
                                                                       f"its last line: {last}")
    if info.get("error"):
        return RunOutput(stdout, stderr, None, None, 0.0, False, command=argv, transport_error=info["error"])
    kb = info.get("peak_rss_kb")
    return RunOutput(
        stdout=stdout, stderr=stderr, exit_code=info.get("exit_code"),
        peak_rss_mb=round(kb / 1024, 1) if kb else None, seconds=info.get("seconds") or 0.0,
        timed_out=bool(info.get("timed_out")) or timed_out_outer, signal=info.get("signal"),
        guard_stopped=bool(info.get("guard_stopped")), command=argv, peak_source="wait4 ru_maxrss",
    )
