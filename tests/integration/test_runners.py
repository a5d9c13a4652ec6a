"""Runners, for real: the local runner runs the toolchain env's `litert-lm` CLI on the tiny Qwen3.5
bundle; the ssh runner does the same through a real OpenSSH server on 127.0.0.1 started here (this
machine plays the Raspberry Pi: the bundle is scp'd, checked with sha256sum on the "device", and the
benchmark runs under the on-device wrapper). No phone here: the adb runner's flow runs against a fake
`adb` (a script that executes `shell` commands with sh and `push` with a copy on this host) whose
"benchmark binary" prints the seeds' real S26 lines. Numbers asserted here come from real runs.

Needs: openssh-server + openssh-client (ssh, scp, ssh-keygen, /usr/sbin/sshd); without them the ssh
tests skip, or fail when CI is set.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import farmtest
from farmtest import REPO, free_port, stop
from farm.devices import BenchProtocol, Device
from farm.devices.bench import run_benchmark
from farm.devices.registry import host_facts, load_registry
from farm.devices.runners import DeviceError, get_runner
from farm.devices.runners.adb import AdbRunner
from farm.devices.runners.local import LocalRunner
from farm.devices.runners.ssh import SshRunner

DATA = farmtest.DATA / "devices"  # real recorded CLI output
TINY = BenchProtocol(prefill_tokens=32, decode_tokens=24, max_num_tokens=64, runs=1, timeout_s=300)
TOO_LONG = BenchProtocol(prefill_tokens=96, decode_tokens=24, runs=1, timeout_s=300)  # > the 64-token KV cache


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Bundle:
    path: Path
    sha256: str


@pytest.fixture(scope="session")
def tiny_bundle(built) -> Bundle:
    """The session's real tiny Qwen3.5 bundle (conftest's shared build)."""
    art = built.summary["artifact"]
    path = Path(art["uri"].removeprefix("file://"))
    assert path.is_file() and sha256(path) == art["sha256"]
    return Bundle(path, art["sha256"])


def local_cpu() -> Device:
    return load_registry(REPO / "infra" / "devices.yaml").get("local-cpu")


# --- local -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_local_real_benchmark(tiny_bundle, toolchain_python):
    rec = run_benchmark(local_cpu(), tiny_bundle.path, tiny_bundle.sha256, "cpu", protocol=TINY,
                        toolchain_python=toolchain_python)
    assert rec["ok"] is True and rec["failure_class"] is None, rec
    assert rec["prefill_tokens_per_s"] > 0 and rec["decode_tokens_per_s"] > 0
    assert rec["ttft_ms"] > 0 and rec["init_ms"] > 0
    assert (rec["prefill_tokens"], rec["decode_tokens"], rec["runs"]) == (32, 24, 1)
    # peak RSS measured by the runner (the CLI prints none): a real process, less than this host's RAM
    assert 10 < rec["peak_mem_mb"] < host_facts()["ram_mb"] and rec["peak_mem_source"] == "wait4 ru_maxrss"
    assert rec["delegate"] == "TfLiteXNNPackDelegate" and rec["total_ops"] >= rec["delegated_ops"] > 0
    assert any(ln.startswith("Prefill speed:") for ln in rec["evidence"])
    assert any("Replacing" in ln for ln in rec["evidence"])
    assert rec["env"]["runtime_version"] and rec["env"]["runtime_version"][0].isdigit()
    assert rec["runtime_version"] == rec["env"]["runtime_version"]
    assert rec["command"][1:3] == ["benchmark", rec["remote_path"]] and "--verbose" in rec["command"]
    assert not Path(rec["remote_path"]).exists()  # cleaned up


@pytest.mark.slow
def test_local_peak_rss_agrees_with_gnu_time(tiny_bundle, toolchain_python, tmp_path):
    """wait4's ru_maxrss is the kernel's hiwater RSS; GNU time reads the same field for its own run."""
    gnu_time = Path("/usr/bin/time")
    if not gnu_time.exists():
        pytest.skip("GNU time (/usr/bin/time) not installed")
    runner = LocalRunner(local_cpu(), toolchain_python)
    try:
        remote = runner.push(tiny_bundle.path, tiny_bundle.sha256)
        ours = runner.run(remote, TINY, "cpu")
        from farm.devices.runners.base import litert_lm_argv

        cp = subprocess.run([str(gnu_time), "-v", *litert_lm_argv(str(runner.litert_lm), remote, TINY, "cpu")],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            env={**os.environ, "HOME": str(tmp_path)}, timeout=300)
        kb = int(next(ln for ln in cp.stderr.splitlines() if "Maximum resident set size" in ln).split(":")[1])
        assert ours.peak_rss_mb == pytest.approx(kb / 1024, rel=0.25), (ours.peak_rss_mb, kb / 1024)
    finally:
        runner.cleanup()


@pytest.mark.slow
def test_local_real_failures_are_classified(tiny_bundle, toolchain_python, tmp_path):
    dev = local_cpu()
    rec = run_benchmark(dev, tiny_bundle.path, tiny_bundle.sha256, "cpu", protocol=TOO_LONG, toolchain_python=toolchain_python)
    assert rec["exit_code"] == 0 and rec["ok"] is False and rec["failure_class"] == "zero_throughput"
    assert "Input token ids are too long" in rec["error"] and rec["prefill_tokens_per_s"] == 0.0
    trunc = tmp_path / "truncated.litertlm"
    trunc.write_bytes(tiny_bundle.path.read_bytes()[:700_000])
    rec = run_benchmark(dev, trunc, sha256(trunc), "cpu", protocol=TINY, toolchain_python=toolchain_python)
    assert rec["exit_code"] == 0 and rec["failure_class"] == "load_failed" and "Failed to map section" in rec["error"]


@pytest.mark.slow
def test_local_timeout_and_memory_guard(tiny_bundle, toolchain_python):
    dev = local_cpu()
    rec = run_benchmark(dev, tiny_bundle.path, tiny_bundle.sha256, "cpu", toolchain_python=toolchain_python,
                        protocol=TINY.model_copy(update={"timeout_s": 0.2}))
    assert rec["failure_class"] == "timeout" and rec["timed_out"] and rec["seconds"] < 5
    # a stop line above all of this host's memory: the guard must stop the run at its first reading
    huge = host_facts()["ram_mb"] * 1024 * 4
    rec = run_benchmark(dev, tiny_bundle.path, tiny_bundle.sha256, "cpu", toolchain_python=toolchain_python,
                        protocol=TINY.model_copy(update={"min_free_kb": huge}))
    assert rec["failure_class"] == "does_not_fit" and rec["prefill_tokens_per_s"] is None


def test_local_push_verifies_sha256(tmp_path):
    f = tmp_path / "b.litertlm"
    f.write_bytes(os.urandom(4096))
    runner = LocalRunner(local_cpu(), "/nonexistent/bin/python")
    try:
        remote = runner.push(f, sha256(f))
        assert sha256(Path(remote)) == sha256(f) and Path(remote).parent != f.parent
        with pytest.raises(DeviceError, match="expected 0000"):
            runner.push(f, "0" * 64)
        runner.cleanup(remote)
        assert not Path(remote).exists()
    finally:
        runner.cleanup()
    # a missing CLI is a device_error record, not an exception
    rec = runner.benchmark(f, sha256(f), "cpu", TINY, env={})
    assert rec["failure_class"] == "device_error" and "litert-lm CLI not found" in rec["error"]


# --- ssh: a real sshd on 127.0.0.1 -------------------------------------------------------------------


@dataclass
class Sshd:
    port: int
    user: str
    key: Path
    known_hosts: Path
    root: Path


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    sshd_bin = Path("/usr/sbin/sshd")
    missing = [b for b in ("ssh", "scp", "ssh-keygen") if shutil.which(b) is None]
    if not sshd_bin.exists():
        missing.append(str(sshd_bin))
    if missing:
        msg = f"OpenSSH not installed ({', '.join(missing)}): apt-get install openssh-server openssh-client"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_ed25519", "user_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "user_ed25519.pub").read_text())
    os.chmod(d / "authorized_keys", 0o600)
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir, needed as root
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    log = d / "sshd.log"
    for _attempt in range(3):  # the free port can be taken between probe and bind
        port = free_port()
        cfg = d / "sshd_config"
        cfg.write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d / 'host_ed25519'}",
            f"PidFile {d / 'sshd.pid'}", f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE", "",
        ]))
        proc = subprocess.Popen([str(sshd_bin), "-D", "-f", str(cfg), "-E", str(log)])
        info = Sshd(port, user, d / "user_ed25519", d / "known_hosts", d)
        runner = SshRunner(ssh_device(info, d / "probe"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            cp = subprocess.run(runner.ssh_argv("true"), stdin=subprocess.DEVNULL, capture_output=True)
            if cp.returncode == 0:
                break
            time.sleep(0.2)
        else:
            stop(proc)
            continue
        break
    else:
        pytest.fail(f"sshd did not start; its log:\n{log.read_text(errors='replace') if log.exists() else ''}")
    yield info
    stop(proc)


def ssh_device(s: Sshd, remote_dir: Path, litert_lm: str = "litert-lm", **kw) -> Device:
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    facts = host_facts()
    return Device.model_validate({
        "id": "pi-on-localhost", "name": "this machine over ssh, standing in for a Raspberry Pi",
        "soc": facts["soc"], "ram_mb": facts["ram_mb"], "os": facts["os"], "accelerators": ["cpu"],
        "runner": {"kind": "ssh", "host": "127.0.0.1", "port": s.port, "user": s.user, "key_path": str(s.key),
                   "remote_dir": str(remote_dir), "litert_lm_path": litert_lm, "python": python,
                   "known_hosts_path": str(s.known_hosts), "connect_timeout_s": 5, **kw},
    })


def test_ssh_push_verifies_sha256_on_the_device(sshd, tmp_path, monkeypatch):
    f = tmp_path / "b.litertlm"
    f.write_bytes(os.urandom(1 << 20))
    remote_dir = tmp_path / "remote"
    runner = get_runner(ssh_device(sshd, remote_dir))
    remote = runner.push(f, sha256(f))
    assert remote == f"{remote_dir}/bundles/{sha256(f)}.litertlm"
    assert sha256(Path(remote)) == sha256(f) and not Path(remote + ".part").exists()
    assert runner._remote_sha256(remote) == sha256(f)  # sha256sum over ssh
    # already there with the right sha256: not sent again
    calls = []
    real = runner._call
    monkeypatch.setattr(runner, "_call", lambda argv, *a, **k: calls.append(argv[0]) or real(argv, *a, **k))
    assert runner.push(f, sha256(f)) == remote and "scp" not in calls
    # a wrong expected sha256 is refused and nothing is left behind
    g = tmp_path / "c.litertlm"
    g.write_bytes(b"not what was announced")
    with pytest.raises(DeviceError, match="expected 1111"):
        runner.push(g, "1" * 64)
    assert sorted(p.name for p in (remote_dir / "bundles").iterdir()) == [Path(remote).name]
    runner.cleanup(remote)
    assert not Path(remote).exists()
    runner.cleanup()
    assert not (remote_dir / "bundles").exists()


def test_ssh_unreachable_is_a_device_error_record(tmp_path):
    f = tmp_path / "b.litertlm"
    f.write_bytes(b"x")
    dead = Sshd(free_port(), "nobody", tmp_path / "no_key", tmp_path / "known_hosts", tmp_path)
    started = time.monotonic()
    rec = run_benchmark(ssh_device(dead, tmp_path / "remote"), f, sha256(f), "cpu", protocol=TINY)
    assert rec["failure_class"] == "device_error" and rec["ok"] is False
    assert "ssh nobody@127.0.0.1" in rec["error"] and rec["env"].get("error")
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_ssh_real_benchmark_on_a_localhost_pi(sshd, tiny_bundle, toolchain_python, tmp_path):
    litert_lm = str(Path(toolchain_python).parent / "litert-lm")
    dev = ssh_device(sshd, tmp_path / "remote", litert_lm)
    rec = run_benchmark(dev, tiny_bundle.path, tiny_bundle.sha256, "cpu", protocol=TINY)
    assert rec["ok"] is True and rec["failure_class"] is None, rec
    assert rec["prefill_tokens_per_s"] > 0 and rec["decode_tokens_per_s"] > 0 and rec["ttft_ms"] > 0
    assert 10 < rec["peak_mem_mb"] < host_facts()["ram_mb"]
    assert rec["peak_mem_source"] == "wait4 ru_maxrss on the device"
    assert rec["remote_path"] == f"{tmp_path / 'remote'}/bundles/{tiny_bundle.sha256}.litertlm"
    assert not Path(rec["remote_path"]).exists()  # cleaned up on the device
    env = rec["env"]
    assert env["runner"] == "ssh" and env["runtime_version"][0].isdigit() and env["ram_mb"] > 0 and env["kernel"]
    assert env["packages"].get("litert-lm") == env["runtime_version"]
    assert any(ln.startswith("Decode speed:") for ln in rec["evidence"])
    # the same failure as locally, judged from the output (the CLI exits 0)
    bad = run_benchmark(dev, tiny_bundle.path, tiny_bundle.sha256, "cpu", protocol=TOO_LONG)
    assert bad["exit_code"] == 0 and bad["failure_class"] == "zero_throughput"
    slow = run_benchmark(dev, tiny_bundle.path, tiny_bundle.sha256, "cpu", protocol=TINY.model_copy(update={"timeout_s": 0.2}))
    assert slow["failure_class"] == "timeout" and slow["seconds"] < 5


# --- adb: the flow against a fake adb (no phone here) -------------------------------------------------


def fake_adb(tmp_path: Path, binary_output: Path, sleep_s: float = 0, start_delay_s: float = 0) -> tuple[Path, Path]:
    """A stand-in `adb` on this host (`shell` -> sh -c, `push` -> copy) and a stand-in benchmark binary
    that prints the output section of a fixture to stderr; `start_delay_s` holds the benchmark's shell
    back before it echoes its pid (a slow adb start). Returns (adb, binary) paths."""
    log = tmp_path / "adb.log"
    adb = tmp_path / "adb"
    adb.write_text(f"""#!{sys.executable}
import json, shutil, subprocess, sys, time
args = sys.argv[1:]
with open({str(log)!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
assert args[0] == "-s", args
args = args[2:]
if args[0] == "shell":
    if "@@farm-pid=" in args[1]:
        time.sleep({start_delay_s})
    sys.exit(subprocess.run(["sh", "-c", args[1]]).returncode)
if args[0] == "push":
    shutil.copyfile(args[1], args[2])
    print(f"{{args[1]}}: 1 file pushed.")
    sys.exit(0)
sys.exit(f"fake adb: unsupported {{args}}")
""")
    binary = tmp_path / "litert_lm_main"  # one process, like the real binary (kill -9 <pid> ends it)
    binary.write_text(f"""#!{sys.executable}
import sys, time
time.sleep({sleep_s})
sys.stderr.write(open({str(binary_output)!r}).read().split("=== output ===\\n", 1)[1])
""")
    for p in (adb, binary):
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return adb, binary


def adb_device(tmp_path: Path, adb: Path, binary: Path, **protocol) -> Device:
    return Device.model_validate({
        "id": "fake-phone", "name": "fake adb target", "soc": "none", "ram_mb": 1, "os": "Android (fake)",
        "accelerators": ["cpu", "gpu"],
        "runner": {"kind": "adb", "serial": "FAKE123", "adb_path": str(adb), "remote_dir": str(tmp_path / "phone"),
                   "binary_path": str(binary), "runtime_version": "fake", "memory_poll_s": 0.2},
        "protocol": {"prefill_tokens": 256, "decode_tokens": 64, "runs": 3, **protocol},
    })


def test_adb_flow_with_fake_adb_replays_seed_lines(tmp_path):
    adb, binary = fake_adb(tmp_path, DATA / "replay_s26_gpu_seed004.txt")
    bundle = tmp_path / "b.litertlm"
    bundle.write_bytes(os.urandom(8192))
    rec = run_benchmark(adb_device(tmp_path, adb, binary), bundle, sha256(bundle), "gpu")
    calls = [json.loads(ln) for ln in (tmp_path / "adb.log").read_text().splitlines()]
    assert any(c[2] == "push" and c[4].endswith(".litertlm.part") for c in calls)  # pushed, then verified
    run = next(c for c in calls if c[2] == "shell" and "--benchmark" in c[3])
    assert "--benchmark_prefill_tokens=256 --benchmark_decode_tokens=64 --num_iterations=3" in run[3]
    # the seed's real S26 GPU lines: full LITERT_CL delegation; no raw results block -> not a measurement
    assert (rec["delegated_ops"], rec["total_ops"], rec["full_delegation"], rec["delegate"]) == (25703, 25703, True, "LITERT_CL")
    assert rec["failure_class"] == "run_error" and rec["ok"] is False
    assert not (tmp_path / "phone" / "bundles" / f"{sha256(bundle)}.litertlm").exists()


def test_adb_flow_with_fake_adb_source_format(tmp_path):
    adb, binary = fake_adb(tmp_path, DATA / "android_format_from_source.txt")
    bundle = tmp_path / "b.litertlm"
    bundle.write_bytes(os.urandom(8192))
    rec = run_benchmark(adb_device(tmp_path, adb, binary), bundle, sha256(bundle), "cpu")
    assert rec["ok"] and (rec["prefill_tokens_per_s"], rec["decode_tokens_per_s"], rec["peak_mem_mb"]) == (450.0, 18.0, 2710.5)
    assert rec["peak_mem_source"] == "runtime report" and rec["env"]["runtime_version"] == "fake"


# start_delay_s=3: the guard's first meminfo read returns before the benchmark's shell has echoed its
# pid; the stop must wait for the pid, not be dropped (CI under load: the run went the binary's full 30 s).
@pytest.mark.parametrize("start_delay_s", [0, 3], ids=["pid_known", "trips_before_the_pid_arrives"])
def test_adb_memory_guard_kills_the_started_process(tmp_path, start_delay_s):
    adb, binary = fake_adb(tmp_path, DATA / "android_format_from_source.txt", sleep_s=30, start_delay_s=start_delay_s)
    bundle = tmp_path / "b.litertlm"
    bundle.write_bytes(os.urandom(8192))
    huge = host_facts()["ram_mb"] * 1024 * 4
    started = time.monotonic()
    rec = run_benchmark(adb_device(tmp_path, adb, binary, min_free_kb=huge), bundle, sha256(bundle), "cpu")
    assert rec["failure_class"] == "does_not_fit" and time.monotonic() - started < 20
    calls = [json.loads(ln) for ln in (tmp_path / "adb.log").read_text().splitlines()]
    kills = [i for i, c in enumerate(calls) if c[2] == "shell" and c[3].startswith("kill -9 ")]
    reads = [i for i, c in enumerate(calls) if c[2] == "shell" and c[3] == "cat /proc/meminfo"]
    assert len(kills) == 1 and reads and reads[0] < kills[0]


def test_adb_push_mismatch_is_a_device_error(tmp_path):
    adb, binary = fake_adb(tmp_path, DATA / "android_format_from_source.txt")
    bundle = tmp_path / "b.litertlm"
    bundle.write_bytes(b"abc")
    runner = AdbRunner(adb_device(tmp_path, adb, binary))
    with pytest.raises(DeviceError, match="expected 2222"):
        runner.push(bundle, "2" * 64)


def test_record_fills_a_device_results_row(tmp_path):
    """The record maps onto lineage's device_results columns (a real SQLite DB, the real model)."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from farm.devices.bench import device_result_values
    from farm.lineage.models import Artifact, Base, DeviceResult
    from farm.lineage.record import record_device_result

    adb, binary = fake_adb(tmp_path, DATA / "android_format_from_source.txt")
    bundle = tmp_path / "b.litertlm"
    bundle.write_bytes(os.urandom(8192))
    rec = run_benchmark(adb_device(tmp_path, adb, binary), bundle, sha256(bundle), "cpu")
    engine = create_engine(f"sqlite:///{tmp_path / 'l.db'}")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        s.add(Artifact(sha256=sha256(bundle), kind="litertlm", size=8192, uri="file:///x", name="b"))
        s.flush()
        rid = record_device_result(s, **device_result_values(rec), flow_run_id=None)
        row = s.get(DeviceResult, rid)
        assert (row.status, row.device_id, row.prefill_tokens, row.decode_tokens, row.decode_tokens_per_s) == (
            "verified", "fake-phone", 256, 64, 18.0)
        assert row.env["run"]["exit_code"] == 0 and row.evidence


@pytest.mark.parametrize("field, value", [("user", "-oProxyCommand=touch /tmp/pwned"), ("host", "-oProxyCommand=x"),
                                          ("user", "a b"), ("host", "h;rm -rf /")])
def test_ssh_user_and_host_are_names_never_options(field, value, tmp_path):
    from pydantic import ValidationError

    from farm.devices.runners.ssh import SshRunnerConfig

    good = {"kind": "ssh", "host": "pi.local", "user": "pi", "key_path": str(tmp_path / "k")}
    with pytest.raises(ValidationError, match=f"{field}"):
        SshRunnerConfig.model_validate({**good, field: value})
    runner = SshRunner(Device.model_validate({"id": "pi", "name": "Pi", "accelerators": ["cpu"], "runner": good,
                                              "soc": "BCM2712", "ram_mb": 8192, "os": "Debian 12"}))
    argv = runner.ssh_argv("true")
    assert argv[argv.index("--") + 1] == "pi@pi.local"  # "--" ends ssh's options before the target
    assert "--" in runner.scp_argv("/a", "/b")


def test_a_missing_toolchain_python_is_named(tmp_path):
    from farm.errors import BadInput
    from farm.settings import Settings
    from farm.toolchain import Toolchain

    missing = tmp_path / "no" / "python"
    with pytest.raises(BadInput, match=f"FARM_TOOLCHAIN_PYTHON {missing} does not exist"):
        Toolchain(Settings(home=tmp_path, toolchain_python=missing)).require()


def _argv(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace").split("\0")
    except OSError:
        return []


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["benchmark", "remote_command"])
def test_ssh_remote_process_killed_mid_benchmark_is_a_named_failure(sshd, tiny_bundle, toolchain_python, tmp_path,
                                                                    victim):
    """Fault injection (tests/faults/README.md): `kill -9` on the "device" mid-benchmark, of the
    litert-lm process, or of the whole remote command (the on-device wrapper and its child). The
    record is a failure that says what ended the run (never out_of_memory for a process that used a
    sliver of the device's memory), nothing is left running there, and the next run measures."""
    import threading

    litert_lm = str(Path(toolchain_python).parent / "litert-lm")
    remote = tmp_path / "remote"
    dev = ssh_device(sshd, remote, litert_lm)
    long = TINY.model_copy(update={"runs": 400})  # ~10 s of runs: time to find and kill it
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(rec=run_benchmark(dev, tiny_bundle.path, tiny_bundle.sha256,
                                                                          "cpu", protocol=long)))
    worker.start()
    pattern = f"{remote}/bundles/"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        # The wrapper is `python3 - {spec JSON}`; the benchmark `python .../litert-lm benchmark ...`
        # (the ssh client and the push's sha256sum name the bundle too: never them).
        pids = [p for p in pids if (a := _argv(p)) and (
            (len(a) > 1 and a[1] == "-") if victim == "remote_command" else
            (any(x.endswith("/litert-lm") for x in a[:2]) and "benchmark" in a))]
        if pids:
            time.sleep(1)  # into the timed runs
            subprocess.run(["kill", "-9", *pids], check=False)
            break
        time.sleep(0.2)
    else:
        pytest.fail("the benchmark never started on the device")
    worker.join(timeout=120)
    rec = out["rec"]
    assert rec["ok"] is False and rec["failure_class"] in ("run_error", "device_error"), rec
    if victim == "benchmark":  # the wrapper saw its child die by a signal it did not send
        assert rec["failure_class"] == "run_error" and "killed by SIGKILL from outside" in rec["error"], rec["error"]
    else:  # the wrapper itself died: ssh says only that the remote command is gone
        assert rec["failure_class"] == "device_error" and "ended without reporting" in rec["error"] \
            and "killed" in rec["error"], rec["error"]
    assert not subprocess.run(["pgrep", "-f", f"{remote}/bundles/"], capture_output=True).stdout  # nothing left
    again = run_benchmark(dev, tiny_bundle.path, tiny_bundle.sha256, "cpu", protocol=TINY)
    assert again["ok"] is True, again
