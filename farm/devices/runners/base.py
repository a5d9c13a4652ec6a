"""One interface for every way of reaching a device.

    push(local_path, sha256) -> remote_path   copy the bundle over; verify it arrived by sha256
                                              (sha256sum on the device side); raise DeviceError if not
    run(remote_path, protocol, accelerator) -> RunOutput(stdout, stderr, exit_code, peak_rss_mb,
                                              seconds, timed_out, ...)
    collect(output, protocol, accelerator) -> the parsed, classified measurement (pure)
    cleanup(remote_path=None)                 remove what push/run left on the device
    env() -> device facts: OS build, kernel, runtime version, SoC, RAM

`benchmark()` strings them together and returns the record the fan-out stores. Success is judged from
the parsed output, never from the exit code (`litert-lm benchmark` exits 0 when a run fails).

Peak memory (`litert-lm benchmark` prints none): on Linux hosts (local, ssh) a small stdlib Python
wrapper (WRAPPER below) starts the benchmark with stdin=/dev/null and a private HOME, and reaps it
with os.wait4(), whose rusage.ru_maxrss is the kernel's high-water mark of the process's resident
set (hiwater_rss, updated on every RSS change): exact, with no sampling gap, and per run. (
getrusage(RUSAGE_CHILDREN) would be the max over every child the orchestrator ever reaped, and
polling /proc/<pid>/status misses whatever happens between the last poll and exit.) The wrapper
also enforces the time limit and the optional free-memory guard on the device itself, killing only
the process group it started. On Android the binary's own --report_peak_memory_footprint figure is
used (its monitor samples every 50 ms).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator

from farm.devices import parse
from farm.devices.protocol import BenchProtocol
from farm.errors import BuildFailed

RUN_MARK = "@@farm-run "  # the wrapper's last stderr line: RUN_MARK + JSON
START_MARK = "@@farm-start"  # the wrapper is running on the device (a later death is not a failed login)


class DeviceError(BuildFailed):
    """The device could not be reached, or a pushed file did not arrive intact."""


@dataclass
class RunOutput:
    stdout: str
    stderr: str
    exit_code: int | None
    peak_rss_mb: float | None
    seconds: float
    timed_out: bool
    signal: int | None = None  # the signal that ended the benchmark process, if any
    guard_stopped: bool = False  # stopped by the free-memory guard
    transport_error: str | None = None  # ssh/adb failed before or around the run
    command: list[str] = field(default_factory=list)
    peak_source: str | None = None  # how peak_rss_mb was measured

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def farm_folder(*shared: str) -> Any:
    """The type of a runner config's `remote_dir`: a device folder the farm may fill and empty,
    absolute and not one of the device's shared folders (/tmp, /home, /sdcard …)."""

    def check(v: str) -> str:
        if not v.startswith("/") or v.rstrip("/") in ("", *shared):
            raise ValueError(f"remote_dir must be an absolute folder of the farm's own, not {v!r}")
        return v.rstrip("/")

    return Annotated[str, AfterValidator(check)]


def now_utc() -> str:
    # Milliseconds: run times are compared (fan-out overlap), and a run can take well under a second.
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def litert_lm_argv(litert_lm: str, model: str, protocol: BenchProtocol, accelerator: str) -> list[str]:
    """The desktop/Linux CLI invocation. --verbose makes it print the delegation lines."""
    argv = [
        litert_lm, "benchmark", model,
        "-p", str(protocol.prefill_tokens),
        "-d", str(protocol.decode_tokens),
        "--runs", str(protocol.runs),
        "--backend", accelerator,
        "--cache", protocol.cache_mode,
        "--verbose",
    ]
    if protocol.max_num_tokens is not None:
        argv += ["--max-num-tokens", str(protocol.max_num_tokens)]
    if protocol.threads is not None and accelerator == "cpu":
        argv += ["--cpu-thread-count", str(protocol.threads)]
    if not protocol.warmup:
        argv.append("--skip-warmup")
    return argv


def split_wrapper_output(stderr: str) -> tuple[str, dict[str, Any] | None]:
    """Strip the wrapper's RUN_MARK line from stderr and return (stderr, its JSON)."""
    info = None
    kept = []
    for line in stderr.splitlines(keepends=True):
        # A benchmark killed mid-write leaves a partial line ("VERBOSE: ") that the wrapper's
        # mark then ends: the mark counts wherever it starts, and the partial line is kept.
        at = line.find(START_MARK)
        if at >= 0:
            if line[:at]:
                kept.append(line[:at] + "\n")
            continue
        at = line.find(RUN_MARK)
        if at >= 0:
            try:
                info = json.loads(line[at + len(RUN_MARK):])
            except ValueError:
                kept.append(line)
                continue
            if line[:at]:
                kept.append(line[:at] + "\n")
        else:
            kept.append(line)
    return "".join(kept), info


class Runner(ABC):
    kind: str = "?"  # set when the runner registers (registry.py)

    config: type | None = None  # this kind's `runner:` config model, set when it registers

    def __init__(self, device: Any, toolchain_python: str | os.PathLike | None = None):
        # device: a farm.devices.registry.Device whose runner section is this kind's config.
        if self.config is not None and not isinstance(device.runner, self.config):
            raise ValueError(f"device {device.id} is not an {self.kind} device")
        self.device = device
        self.cfg = device.runner
        self.toolchain_python = toolchain_python

    # A CPU-class runner runs the toolchain's gates under its class (farm/devices/classes.py):
    # `presentation` gives the gate request's `cpu` field (None: the toolchain process's own class).
    runs_gates: bool = False
    # An emulated class reports answers, never speed or memory: the fan-out skips it.
    measures_speed: bool = True

    def presentation(self, res: Any, host: Any) -> dict[str, Any] | None:
        """The `cpu` presentation of this runner's class for the toolchain of `res` on a host whose
        own class is `host` (farm_common/presentation.py); NotPresentable where it cannot be."""
        raise NotImplementedError(f"a {self.kind} device runs no gates")

    # --- the interface -------------------------------------------------------------------------
    @abstractmethod
    def push(self, local_path: str | os.PathLike, sha256: str) -> str: ...

    @abstractmethod
    def run(self, remote_path: str, protocol: BenchProtocol, accelerator: str) -> RunOutput: ...

    @abstractmethod
    def cleanup(self, remote_path: str | None = None) -> None: ...

    @abstractmethod
    def env(self) -> dict[str, Any]: ...

    def parse(self, output: RunOutput) -> dict[str, Any]:
        return parse.parse_cli_benchmark(output.stdout, output.stderr)

    def collect(self, output: RunOutput, protocol: BenchProtocol, accelerator: str) -> dict[str, Any]:
        """The measurement fields of a record, from one run's output (pure: no device access)."""
        p = self.parse(output)
        failure, error = parse.classify(
            p, accelerator=accelerator, timed_out=output.timed_out, guard_stopped=output.guard_stopped,
            signal=output.signal, transport_error=output.transport_error,
        )
        peak = p.get("peak_mem_mb") if p.get("peak_mem_mb") is not None else output.peak_rss_mb
        ram = getattr(self.device, "ram_mb", None)
        if failure == "out_of_memory" and output.signal == 9 and peak is not None and ram and peak < ram / 2:
            # A SIGKILL the runner did not send is the OOM killer's only when memory was short: a
            # process at a sliver of the device's RAM was killed from outside (an operator, a
            # supervisor, a dying host), and the card must not say the file does not fit.
            failure, error = "run_error", (f"killed by SIGKILL from outside the runner at a peak of {peak:.0f} MB of "
                                           f"the device's {ram:,} MB: not a memory kill")
        evidence = [d["line"] for d in _distinct_lines(p["delegation"])]
        evidence += p.get("results_lines") or []
        evidence += [e["line"] for e in p.get("errors") or []][:12]
        if output.transport_error:
            evidence.append(output.transport_error)
        ok = failure is None
        status = "verified" if ok else ("does_not_fit" if failure == "does_not_fit" else "failed")
        return {
            "status": status,
            "accelerator": accelerator,
            "runs": protocol.runs,
            "prefill_tokens": p.get("prefill_tokens") or protocol.prefill_tokens,
            "decode_tokens": p.get("decode_tokens") or protocol.decode_tokens,
            "prefill_tokens_per_s": p.get("prefill_tokens_per_s"),
            "decode_tokens_per_s": p.get("decode_tokens_per_s"),
            "ttft_ms": p.get("ttft_ms"),
            "init_ms": p.get("init_ms"),
            "peak_mem_mb": round(peak, 1) if peak is not None else None,
            "peak_mem_source": "runtime report" if p.get("peak_mem_mb") is not None else output.peak_source,
            "delegated_ops": p.get("delegated_ops"),
            "total_ops": p.get("total_ops"),
            "delegate": p.get("delegate"),
            "full_delegation": p.get("full_delegation"),
            "failure_class": failure,
            "error": error,
            "ok": ok,
            "evidence": evidence,
            "exit_code": output.exit_code,
            "timed_out": output.timed_out,
            "seconds": round(output.seconds, 3),
            "command": output.command,
            "protocol": protocol.model_dump(),
            "cache_mode": protocol.cache_mode,
            "context_length": protocol.max_num_tokens or p.get("max_num_tokens"),
            "output_format": p.get("format"),
        }

    # --- end to end ----------------------------------------------------------------------------
    def benchmark(
        self,
        local_path: str | os.PathLike,
        sha256: str,
        accelerator: str,
        protocol: BenchProtocol | None = None,
        *,
        env: dict[str, Any] | None = None,
        keep: bool = False,
    ) -> dict[str, Any]:
        """push -> run -> collect -> cleanup; always returns a record (a device that cannot be
        reached is a record with failure_class device_error, not an exception)."""
        protocol = protocol or self.device.protocol
        started = now_utc()
        base = {"device": self.device.id, "device_id": self.device.id, "bundle_sha256": sha256,
                "artifact_sha256": sha256, "measured_at": started, "started_at": started, "runner": self.kind}
        if accelerator not in self.device.accelerators:
            raise ValueError(f"device {self.device.id} has no {accelerator} (it has {self.device.accelerators})")
        try:
            facts = env if env is not None else self.env()
        except DeviceError as e:
            facts = {"error": str(e)}
        remote = None
        try:
            remote = self.push(local_path, sha256)
            out = self.run(remote, protocol, accelerator)
        except DeviceError as e:
            out = RunOutput("", "", None, None, 0.0, False, transport_error=str(e))
        finally:
            if remote is not None and not keep:
                try:
                    self.cleanup(remote)
                except DeviceError:
                    pass
        rec = {**base, **self.collect(out, protocol, accelerator), "env": facts, "remote_path": remote,
               "finished_at": now_utc()}
        rec["runtime"] = facts.get("runtime")
        rec["runtime_version"] = facts.get("runtime_version")
        return rec


def _distinct_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for d in lines:
        if d["line"] not in seen:
            seen.add(d["line"])
            out.append(d)
    return out


# --- scripts run by a Python interpreter on the device (local host or ssh host) -------------------
# Both are stdlib-only and self-contained: they are sent as source (python -c / ssh ... python3 -).

WRAPPER = r'''
import json, os, signal, subprocess, sys, tempfile, shutil, time
spec = json.loads(sys.argv[1])
home_parent = spec.get("home_parent") or None
if home_parent:
    os.makedirs(home_parent, exist_ok=True)
home = tempfile.mkdtemp(prefix="litertlm-home-", dir=home_parent)
env = dict(os.environ)
env.update(spec.get("env") or {})
env["HOME"] = home
min_free_kb = spec.get("min_free_kb")
def mem_available_kb():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1])
    except OSError:
        return None
info = {"exit_code": None, "signal": None, "peak_rss_kb": None, "seconds": None, "timed_out": False,
        "guard_stopped": False, "min_free_kb_seen": None, "error": None}
t0 = time.monotonic()
sys.stderr.write("@@farm-start\n"); sys.stderr.flush()
try:
    sys.stdout.flush(); sys.stderr.flush()
    def die_with_wrapper():
        # Linux: the benchmark is SIGKILLed when this wrapper dies (kill -9 of the remote command,
        # a dropped ssh session): it runs in its own session, and would otherwise outlive it.
        try:
            import ctypes
            ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
        except Exception:
            pass
    proc = subprocess.Popen(spec["argv"], stdin=subprocess.DEVNULL, cwd=spec.get("cwd") or None, env=env,
                            start_new_session=True, preexec_fn=die_with_wrapper)
except OSError as e:
    info["error"] = "could not start %s: %s" % (spec["argv"][0], e)
    proc = None
if proc is not None:
    deadline = t0 + float(spec["timeout_s"])
    next_mem = 0.0
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.monotonic()
        if now >= deadline and not info["timed_out"] and not info["guard_stopped"]:
            info["timed_out"] = True
            os.killpg(proc.pid, signal.SIGKILL)
        if min_free_kb and now >= next_mem and not info["timed_out"] and not info["guard_stopped"]:
            next_mem = now + float(spec.get("mem_poll_s") or 0.5)
            free = mem_available_kb()
            if free is not None:
                seen = info["min_free_kb_seen"]
                info["min_free_kb_seen"] = free if seen is None else min(seen, free)
                if free < min_free_kb:
                    info["guard_stopped"] = True
                    os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    info["seconds"] = round(time.monotonic() - t0, 3)
    info["peak_rss_kb"] = ru.ru_maxrss
    if os.WIFSIGNALED(status):
        info["signal"] = os.WTERMSIG(status)
    else:
        info["exit_code"] = os.WEXITSTATUS(status)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything the benchmark left behind in its group
    except (ProcessLookupError, PermissionError):
        pass
shutil.rmtree(home, ignore_errors=True)
sys.stdout.flush()
sys.stderr.write("@@farm-run " + json.dumps(info) + "\n")
sys.stderr.flush()
'''

ENV_SCRIPT = r'''
import json, os, platform, re, shutil, subprocess, sys
litert_lm = sys.argv[1] if len(sys.argv) > 1 else "litert-lm"
litert_lm = shutil.which(litert_lm) or litert_lm
def read(p):
    try:
        with open(p, errors="replace") as f:
            return f.read()
    except OSError:
        return None
def run(argv, timeout=120):
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return None
facts = {"hostname": platform.node(), "os_build": platform.platform(), "kernel": platform.release(),
         "machine": platform.machine(), "python": platform.python_version()}
osr = read("/etc/os-release") or ""
m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', osr, re.M)
facts["os"] = m.group(1) if m else None
model = (read("/proc/device-tree/model") or "").strip("\x00\n ")
cpuinfo = read("/proc/cpuinfo") or ""
cpu = None
for key in ("model name", "Hardware", "Model"):
    m = re.search(r"^%s\s*:\s*(.+)$" % key, cpuinfo, re.M)
    if m:
        cpu = m.group(1).strip()
        break
facts["device_model"] = model or None
facts["soc"] = model or cpu or platform.processor() or platform.machine()
facts["cpu"] = cpu
facts["cpu_count"] = os.cpu_count()
m = re.search(r"^MemTotal:\s*(\d+) kB", read("/proc/meminfo") or "", re.M)
facts["ram_mb"] = int(m.group(1)) // 1024 if m else None
out = run([litert_lm, "--version"])
facts["runtime"] = "litert-lm"
facts["runtime_version_text"] = out
m = re.search(r"version\s+(\S+)", out or "")
facts["runtime_version"] = m.group(1) if m else None
packages = {}
try:
    with open(litert_lm, "rb") as f:
        first = f.readline().decode(errors="replace")
    if first.startswith("#!"):
        py = first[2:].strip().split()[0]
        code = ("import importlib.metadata as m, json\nout = {}\n"
                "for n in ('litert-lm', 'litert-lm-api'):\n"
                "    try: out[n] = m.version(n)\n"
                "    except Exception: pass\nprint(json.dumps(out))")
        got = run([py, "-c", code])
        packages = json.loads(got.splitlines()[-1]) if got else {}
except (OSError, ValueError, IndexError):
    pass
facts["packages"] = packages
for name, argv in (("throttled", ["vcgencmd", "get_throttled"]), ("temperature", ["vcgencmd", "measure_temp"])):
    got = run(argv, timeout=10)
    if got is not None:
        facts[name] = got
print(json.dumps(facts))
'''
