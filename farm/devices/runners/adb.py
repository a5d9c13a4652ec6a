"""An Android phone over adb, running LiteRT-LM's Android benchmark binary (`litert_lm_main` or the
prebuilt `litert_lm_advanced_main`), with the flags the seeds' S26 / Pixel 8a rows used:

    adb -s SERIAL shell 'cd DIR && echo @@farm-pid=$$ && exec BINARY --model_path=DIR/bundles/<sha>.litertlm
        --backend=gpu --benchmark --benchmark_prefill_tokens=256 --benchmark_decode_tokens=64
        --num_iterations=3 --report_peak_memory_footprint [--max_num_tokens=N] [--num_cpu_threads=N]
        [--disable_cache | --cache_dir=:memory | --cache_dir=DIR/cache]'

Flag names are those of LiteRT-LM runtime/engine/shared_flags.cc. The bundle (and the binary, when
`local_binary` is set) is pushed to a .part file, checked with `sha256sum` on the phone, then renamed.
The time limit and the optional free-memory guard (the seeds' harness: read free memory every 2 s,
stop under 400,000 KiB -> does_not_fit) are enforced from this host by `adb shell kill -9 <pid>` of
the process this runner started (its pid is echoed before exec). Peak memory is the binary's own
--report_peak_memory_footprint figure. Figures: median of iterations 2..N (parse.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from farm.devices import parse
from farm.devices.protocol import BenchProtocol
from farm.devices.runners.base import DeviceError, Runner, RunOutput, farm_folder
from farm.devices.runners.registry import RUNNERS

q = shlex.quote
PID_MARK = "@@farm-pid="
GETPROPS = (
    "ro.product.manufacturer", "ro.product.model", "ro.build.version.release", "ro.build.version.sdk",
    "ro.build.fingerprint", "ro.soc.manufacturer", "ro.soc.model", "ro.board.platform", "ro.hardware",
)


PhoneFolder = farm_folder("/data", "/data/local/tmp", "/sdcard")  # never one of a phone's shared folders


class AdbRunnerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["adb"]
    serial: str
    remote_dir: PhoneFolder = "/data/local/tmp/litertlm-farm"
    # The LiteRT-LM Android benchmark binary on the device (litert_lm_main / litert_lm_advanced_main).
    binary_path: str = "/data/local/tmp/litertlm-farm/litert_lm_main"
    local_binary: Path | None = None  # pushed (sha256-verified) to binary_path when set
    # What the binary is: runtime_version short (a version, <= 32 chars, e.g. "0.16.0"), runtime_label
    # free text (e.g. "prebuilt litert_lm_advanced_main 2026-09-18"). Without a version the record
    # carries "bin-sha256:<16 hex>" of the binary on the phone.
    runtime_version: str | None = Field(None, max_length=32)
    runtime_label: str | None = None
    adb_path: str = "adb"
    extra_args: list[str] = Field(default_factory=list)
    memory_poll_s: float = Field(2.0, gt=0)  # the seeds' harness read free memory every 2 s


@RUNNERS.register("adb", config=AdbRunnerConfig)
class AdbRunner(Runner):
    cfg: AdbRunnerConfig

    # --- command construction (pure) -------------------------------------------------------------
    def adb_argv(self, *args: str) -> list[str]:
        return [self.cfg.adb_path, "-s", self.cfg.serial, *args]

    def shell_argv(self, command: str) -> list[str]:
        return self.adb_argv("shell", command)

    def binary_args(self, remote_path: str, protocol: BenchProtocol, accelerator: str) -> list[str]:
        args = [
            self.cfg.binary_path,
            f"--model_path={remote_path}",
            f"--backend={accelerator}",
            "--benchmark",
            f"--benchmark_prefill_tokens={protocol.prefill_tokens}",
            f"--benchmark_decode_tokens={protocol.decode_tokens}",
            f"--num_iterations={protocol.runs}",
            "--report_peak_memory_footprint",
        ]
        if protocol.max_num_tokens is not None:
            args.append(f"--max_num_tokens={protocol.max_num_tokens}")
        if protocol.threads is not None and accelerator == "cpu":
            args.append(f"--num_cpu_threads={protocol.threads}")
        if protocol.cache_mode == "no":
            args.append("--disable_cache")
        elif protocol.cache_mode == "memory":
            args.append("--cache_dir=:memory")
        else:
            args.append(f"--cache_dir={self.cfg.remote_dir}/cache")
        return args + list(self.cfg.extra_args)

    def run_command(self, remote_path: str, protocol: BenchProtocol, accelerator: str) -> str:
        """The one `adb shell` command line of a benchmark run."""
        binary = " ".join(q(a) for a in self.binary_args(remote_path, protocol, accelerator))
        return f"cd {q(self.cfg.remote_dir)} && echo {PID_MARK}$$ && exec {binary}"

    # --- plumbing ----------------------------------------------------------------------------------
    def _call(self, argv: list[str], what: str, timeout: float = 120) -> subprocess.CompletedProcess:
        try:
            cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DeviceError(f"adb {self.cfg.serial}: {what} timed out after {timeout:.0f}s") from None
        except FileNotFoundError:
            raise DeviceError(f"{self.cfg.adb_path} is not installed on this host") from None
        err = _text(cp.stderr) + _text(cp.stdout)
        if any(e["class"] == "device_error" for e in parse.find_errors(err)) or (cp.returncode != 0 and what.startswith("push")):
            raise DeviceError(f"adb {self.cfg.serial}: {what} failed (exit {cp.returncode}): {_last(err)}")
        return cp

    def _sh(self, command: str, what: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self._call(self.shell_argv(command), what, timeout)

    def _remote_sha256(self, path: str) -> str | None:
        out = _text(self._sh(f"if [ -f {q(path)} ]; then sha256sum {q(path)}; fi", f"sha256sum {path}").stdout).split()
        return out[0] if out and len(out[0]) == 64 else None

    def _push_file(self, src: Path, remote: str, sha256: str, mode: str | None = None) -> str:
        folder = remote.rsplit("/", 1)[0]
        self._sh(f"mkdir -p {q(folder)}", "mkdir")
        if self._remote_sha256(remote) == sha256:
            return remote
        part = remote + ".part"
        self._call(self.adb_argv("push", str(src), part), f"push {src.name}", timeout=max(600, src.stat().st_size / 2e6))
        got = self._remote_sha256(part)
        if got != sha256:
            self._sh(f"rm -f {q(part)}", "rm")
            raise DeviceError(f"{src.name} pushed to {self.cfg.serial}:{part} has sha256 {got}, expected {sha256}")
        chmod = f" && chmod {mode} {q(remote)}" if mode else ""
        self._sh(f"mv -f {q(part)} {q(remote)}{chmod}", "mv")
        return remote

    # --- interface -----------------------------------------------------------------------------------
    def push(self, local_path: str | os.PathLike, sha256: str) -> str:
        src = Path(local_path)
        if not src.is_file():
            raise DeviceError(f"bundle {src} does not exist")
        if self.cfg.local_binary is not None:
            b = Path(self.cfg.local_binary)
            if not b.is_file():
                raise DeviceError(f"LiteRT-LM Android binary {b} does not exist")
            self._push_file(b, self.cfg.binary_path, _sha256(b), mode="755")
        return self._push_file(src, f"{self.cfg.remote_dir}/bundles/{sha256}.litertlm", sha256)

    def run(self, remote_path: str, protocol: BenchProtocol, accelerator: str) -> RunOutput:
        argv = self.shell_argv(self.run_command(remote_path, protocol, accelerator))
        started = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError:
            raise DeviceError(f"{self.cfg.adb_path} is not installed on this host") from None
        out: list[str] = []
        err: list[str] = []
        pid: list[int] = []

        def pump(stream, sink: list[str], watch_pid: bool) -> None:
            for raw in stream:
                line = raw.decode("utf-8", errors="replace")
                if watch_pid and not pid and line.startswith(PID_MARK):
                    m = re.match(rf"{re.escape(PID_MARK)}(\d+)", line)
                    if m:
                        pid.append(int(m[1]))
                        continue
                sink.append(line)

        threads = [threading.Thread(target=pump, args=(proc.stdout, out, True), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, err, False), daemon=True)]
        for t in threads:
            t.start()
        timed_out = guard = killed = False
        next_mem = 0.0
        while proc.poll() is None:
            now = time.monotonic()
            if not (timed_out or guard) and now - started >= protocol.timeout_s:
                timed_out = True
            if protocol.min_free_kb and not (timed_out or guard) and now >= next_mem:
                next_mem = now + self.cfg.memory_poll_s
                free = self._mem_available_kb()
                if free is not None and free < protocol.min_free_kb:
                    guard = True
            # The stop can trip before the phone has echoed the pid (a slow adb start under load):
            # it stays pending and the kill goes out as soon as the pid is known.
            if (timed_out or guard) and not killed and pid:
                killed = True
                self._kill(pid)
            if (timed_out or guard) and now - started > protocol.timeout_s + 60:
                proc.kill()  # our own adb client, if the kill did not end the shell
            time.sleep(0.1)
        drain_until = time.monotonic() + 10  # a killed process's pipes close at once; don't hang on strays
        for t in threads:
            t.join(timeout=max(0.0, drain_until - time.monotonic()))
        rc = proc.returncode
        signal = rc - 128 if rc is not None and 128 < rc < 160 else None
        stderr = "".join(err)
        transport = None
        if rc == 255 or (rc != 0 and not out and any(e["class"] == "device_error" for e in parse.find_errors(stderr))):
            transport = f"adb {self.cfg.serial}: {_last(stderr)}"
        return RunOutput(
            stdout="".join(out), stderr=stderr, exit_code=rc, peak_rss_mb=None,
            seconds=time.monotonic() - started, timed_out=timed_out, signal=signal, guard_stopped=guard,
            transport_error=transport, command=argv, peak_source=None,
        )

    def _kill(self, pid: list[int]) -> None:
        if pid:
            try:
                self._sh(f"kill -9 {pid[0]}", "kill", timeout=30)
            except DeviceError:
                pass

    def _mem_available_kb(self) -> int | None:
        try:
            text = _text(self._sh("cat /proc/meminfo", "meminfo", timeout=30).stdout)
        except DeviceError:
            return None
        m = re.search(r"^MemAvailable:\s*(\d+)", text, re.M)
        return int(m[1]) if m else None

    def parse(self, output: RunOutput) -> dict[str, Any]:
        return parse.parse_android_benchmark(output.stdout + "\n" + output.stderr)

    def cleanup(self, remote_path: str | None = None) -> None:
        if remote_path is not None:
            self._sh(f"rm -f {q(remote_path)} {q(remote_path)}_*.xnnpack_cache", "cleanup")
        else:
            d = self.cfg.remote_dir
            self._sh(f"rm -rf {q(d + '/bundles')} {q(d + '/cache')}", "cleanup")

    def env_command(self) -> str:
        props = "; ".join(f'echo "{p}=$(getprop {p})"' for p in GETPROPS)
        return (f'{props}; echo "kernel=$(uname -r)"; grep MemTotal /proc/meminfo; '
                f"if [ -f {q(self.cfg.binary_path)} ]; then sha256sum {q(self.cfg.binary_path)}; fi")

    def env(self) -> dict[str, Any]:
        text = _text(self._sh(self.env_command(), "env").stdout)
        return parse_android_env(text, self.cfg)


def parse_android_env(text: str, cfg: AdbRunnerConfig) -> dict[str, Any]:
    props = dict(re.findall(r"^([\w.]+)=(.*)$", text, re.M))
    mem = re.search(r"^MemTotal:\s*(\d+) kB", text, re.M)
    sha = re.search(r"^([0-9a-f]{64})\s+(\S+)", text, re.M)
    model = " ".join(x for x in (props.get("ro.product.manufacturer"), props.get("ro.product.model")) if x)
    soc = " ".join(x for x in (props.get("ro.soc.manufacturer"), props.get("ro.soc.model")) if x) or props.get("ro.board.platform")
    release = props.get("ro.build.version.release")
    return {
        "runner": "adb",
        "serial": cfg.serial,
        "device_model": model or None,
        "soc": soc or None,
        "os": f"Android {release}" if release else None,
        "os_build": props.get("ro.build.fingerprint") or None,
        "sdk": props.get("ro.build.version.sdk") or None,
        "kernel": props.get("kernel") or None,
        "ram_mb": int(mem[1]) // 1024 if mem else None,
        "runtime": "litert-lm",
        "runtime_version": cfg.runtime_version or (f"bin-sha256:{sha[1][:16]}" if sha else None),
        "runtime_label": cfg.runtime_label,
        "binary_path": cfg.binary_path,
        "binary_sha256": sha[1] if sha else None,
    }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", errors="replace")


def _last(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"
