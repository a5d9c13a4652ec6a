"""A remote Linux host (a Raspberry Pi, an ARM board) over the OpenSSH client binaries.

Every call: `ssh -p PORT -i KEY -o BatchMode=yes -o StrictHostKeyChecking=accept-new
-o ConnectTimeout=N -o IdentitiesOnly=yes -o LogLevel=ERROR USER@HOST CMD` (scp with the same options
for the copy). The bundle goes to REMOTE_DIR/bundles/<sha256>.litertlm through a .part file and is
only renamed into place after `sha256sum` on the device matches; an existing file with the right
sha256 is not sent again. The benchmark runs under the stdlib wrapper (base.WRAPPER) sent on ssh's
stdin to the device's python3: the time limit, the free-memory guard and the peak RSS (os.wait4) are
all enforced and measured on the device. ssh's own failures (exit 255) are device_error.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from farm.devices.protocol import BenchProtocol
from farm.devices.runners.base import (
    ENV_SCRIPT,
    START_MARK,
    WRAPPER,
    DeviceError,
    Runner,
    RunOutput,
    farm_folder,
    litert_lm_argv,
)
from farm.devices.runners.local import _from_wrapper
from farm.devices.runners.registry import RUNNERS

q = shlex.quote


SshFolder = farm_folder("/tmp", "/home", "/root")  # never one of a Linux host's shared folders


class SshRunnerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["ssh"]
    host: str
    port: int = Field(22, gt=0, lt=65536)
    user: str
    key_path: Path
    remote_dir: SshFolder = "/tmp/litertlm-farm"
    litert_lm_path: str = "litert-lm"
    python: str = "python3"  # runs the stdlib wrapper that measures peak RSS on the device
    connect_timeout_s: int = Field(10, gt=0)
    known_hosts_path: Path | None = None  # default: ssh's own (~/.ssh/known_hosts)

    @field_validator("key_path", "known_hosts_path")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return v.expanduser() if v is not None else None

    @field_validator("user", "host")
    @classmethod
    def _not_an_option(cls, v: str, info) -> str:
        # ssh would parse "-oProxyCommand=…" as an option: a user or host is a name, never a flag.
        pattern = r"[A-Za-z0-9_.][A-Za-z0-9_.-]*" if info.field_name == "user" else r"[A-Za-z0-9_.:\[\]][A-Za-z0-9_.:\[\]-]*"
        if not re.fullmatch(pattern, v):
            raise ValueError(f"{info.field_name} {v!r} is not a plain {info.field_name} name")
        return v


@RUNNERS.register("ssh", config=SshRunnerConfig)
class SshRunner(Runner):
    cfg: SshRunnerConfig

    # --- command construction (pure) -------------------------------------------------------------
    def options(self) -> list[str]:
        c = self.cfg
        opts = [
            "-i", str(c.key_path),
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"ConnectTimeout={c.connect_timeout_s}",
            "-o", "IdentitiesOnly=yes",
            "-o", "LogLevel=ERROR",
            "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=4",
        ]
        if c.known_hosts_path is not None:
            opts += ["-o", f"UserKnownHostsFile={c.known_hosts_path}"]
        return opts

    @property
    def target(self) -> str:
        return f"{self.cfg.user}@{self.cfg.host}"

    def ssh_argv(self, remote_command: str) -> list[str]:
        # "--": whatever the target is, ssh takes it as the destination, never as an option.
        return ["ssh", "-p", str(self.cfg.port), *self.options(), "--", self.target, remote_command]

    def scp_argv(self, local: str, remote: str) -> list[str]:
        return ["scp", "-q", "-P", str(self.cfg.port), *self.options(), "--", local, f"{self.target}:{remote}"]

    # --- plumbing ----------------------------------------------------------------------------------
    def _call(self, argv: list[str], what: str, *, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        try:
            cp = subprocess.run(argv, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                                capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DeviceError(f"ssh {self.target}:{self.cfg.port}: {what} timed out after {timeout:.0f}s") from None
        except FileNotFoundError as e:
            raise DeviceError(f"{argv[0]} is not installed on this host ({e})") from None
        if cp.returncode == 255:
            raise DeviceError(f"ssh {self.target}:{self.cfg.port}: {what} failed: {_last(cp.stderr)}")
        return cp

    def _sh(self, command: str, what: str, **kw: Any) -> subprocess.CompletedProcess:
        return self._call(self.ssh_argv(command), what, **kw)

    def _remote_sha256(self, path: str) -> str | None:
        cp = self._sh(f"if [ -f {q(path)} ]; then sha256sum {q(path)}; fi", f"sha256sum {path}")
        out = cp.stdout.decode(errors="replace").split()
        return out[0] if out and len(out[0]) == 64 else None

    # --- interface -----------------------------------------------------------------------------------
    def push(self, local_path: str | os.PathLike, sha256: str) -> str:
        src = Path(local_path)
        if not src.is_file():
            raise DeviceError(f"bundle {src} does not exist")
        folder = f"{self.cfg.remote_dir}/bundles"
        remote = f"{folder}/{sha256}.litertlm"
        self._sh(f"mkdir -p {q(folder)}", "mkdir")
        if self._remote_sha256(remote) == sha256:
            return remote
        part = remote + ".part"
        size = src.stat().st_size
        cp = self._call(self.scp_argv(str(src), part), f"copy {src.name}", timeout=max(600, size / 2e6))
        if cp.returncode != 0:
            raise DeviceError(f"scp to {self.target}:{part} failed (exit {cp.returncode}): {_last(cp.stderr)}")
        got = self._remote_sha256(part)
        if got != sha256:
            self._sh(f"rm -f -- {q(part)}", "rm")
            raise DeviceError(f"bundle copied to {self.target}:{part} has sha256 {got}, expected {sha256}")
        self._sh(f"mv -f -- {q(part)} {q(remote)}", "mv")
        return remote

    def run(self, remote_path: str, protocol: BenchProtocol, accelerator: str) -> RunOutput:
        argv = litert_lm_argv(self.cfg.litert_lm_path, remote_path, protocol, accelerator)
        spec = {
            "argv": argv, "cwd": self.cfg.remote_dir, "home_parent": f"{self.cfg.remote_dir}/home",
            "timeout_s": protocol.timeout_s, "min_free_kb": protocol.min_free_kb,
        }
        cmd = self.ssh_argv(f"{q(self.cfg.python)} - {q(json.dumps(spec))}")
        try:
            cp = subprocess.run(cmd, input=WRAPPER.encode(), capture_output=True,
                                timeout=protocol.timeout_s + self.cfg.connect_timeout_s + 120)
        except subprocess.TimeoutExpired as e:
            out = RunOutput(_text(e.stdout), _text(e.stderr), None, None, protocol.timeout_s, True, command=argv)
            return out
        stdout, stderr = _text(cp.stdout), _text(cp.stderr)
        if cp.returncode == 255 and "@@farm-run " not in stderr and START_MARK not in stderr:
            return RunOutput(stdout, stderr, None, None, 0.0, False, command=argv,
                             transport_error=f"ssh {self.target}:{self.cfg.port} failed: {_last(cp.stderr)}")
        out = _from_wrapper(stdout, stderr, argv, False, cp.returncode)
        if out.peak_source:
            out.peak_source = "wait4 ru_maxrss on the device"
        return out

    def cleanup(self, remote_path: str | None = None) -> None:
        if remote_path is not None:
            self._sh(f"rm -f -- {q(remote_path)} {q(remote_path)}_*.xnnpack_cache", "cleanup")
        else:
            d = self.cfg.remote_dir
            self._sh(f"rm -rf -- {q(d + '/bundles')} {q(d + '/home')}", "cleanup")

    def env(self) -> dict[str, Any]:
        cp = self._sh(f"{q(self.cfg.python)} - {q(self.cfg.litert_lm_path)}", "env", input=ENV_SCRIPT.encode(), timeout=240)
        try:
            facts = json.loads(cp.stdout.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise DeviceError(f"ssh {self.target}: could not read device facts (exit {cp.returncode}): {_last(cp.stderr)}") from None
        facts["runner"] = "ssh"
        facts["litert_lm_path"] = self.cfg.litert_lm_path
        return facts


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", errors="replace")


def _last(b: bytes | str | None) -> str:
    lines = [ln.strip() for ln in _text(b).splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
