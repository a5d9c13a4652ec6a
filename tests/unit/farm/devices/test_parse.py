"""Parsers, failure classification and the device registry: pure, no toolchain needed.

Fixtures (tests/data/devices/):
- local_*.txt: REAL output of `litert-lm benchmark` (litert-lm 0.18.1) on this kind of host,
  recorded by tests/data/devices/record.py (the header of each says how).
- replay_s26_*_seed004.txt: the Galaxy S26 evidence lines quoted in seed 004, verbatim (test_replay_*).
- android_format_from_source.txt: NOT recorded; the Android binary's BenchmarkInfo format written from
  LiteRT-LM's source with synthetic numbers (its header says so).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from farm.devices import parse
from farm.devices.parse import FAILURE_CLASSES, classify, parse_android_benchmark, parse_cli_benchmark
from farm.devices.protocol import BenchProtocol
from farm.devices.registry import load_registry
from farm.devices.runners.adb import AdbRunner, parse_android_env
from farm.devices.runners.base import RunOutput, litert_lm_argv, split_wrapper_output
from farm.devices.runners.local import LocalRunner
from farm.devices.runners.ssh import SshRunner
from farm.errors import BadInput
import farmtest
from farmtest import REPO

DATA = farmtest.DATA / "devices"


def cli_fixture(name: str) -> tuple[str, str, str]:
    """(header, stdout, stderr) of a recorded CLI run."""
    text = (DATA / name).read_text()
    header, body = text.split("=== stdout ===\n", 1)
    stdout, stderr = body.split("=== stderr ===\n", 1)
    return header, stdout, stderr


def replay(name: str) -> str:
    return (DATA / name).read_text().split("=== output ===\n", 1)[1]


# --- desktop CLI: real output ------------------------------------------------------------------


def test_real_cli_ok_output_parses_to_positive_numbers():
    header, out, err = cli_fixture("local_benchmark_ok.txt")
    assert "REAL output" in header
    p = parse_cli_benchmark(out, err)
    # the exact figures of the recorded results block
    block = out[out.index("----- Results -----"):]
    expect = {k: float(m[1]) for k, m in (
        ("prefill", re.search(r"Prefill speed:\s+([\d.]+)", block)),
        ("decode", re.search(r"Decode speed:\s+([\d.]+)", block)),
        ("init", re.search(r"Init time:\s+([\d.]+)", block)),
        ("ttft", re.search(r"Time to first token:\s+([\d.]+)", block)),
    )}
    assert p["prefill_tokens_per_s"] == expect["prefill"] > 0
    assert p["decode_tokens_per_s"] == expect["decode"] > 0
    assert p["init_ms"] == pytest.approx(expect["init"] * 1000) and p["init_ms"] > 0
    assert p["ttft_ms"] == pytest.approx(expect["ttft"] * 1000) and p["ttft_ms"] > 0
    assert (p["prefill_tokens"], p["decode_tokens"], p["max_num_tokens"], p["runs"]) == (32, 24, 64, 1)
    assert p["backend"] == "cpu" and p["has_results"]
    # --verbose delegation lines: XNNPACK on CPU, the largest subgraph is the main prefill graph
    assert p["delegate"] == "TfLiteXNNPackDelegate"
    assert p["delegated_ops"] == 614 and p["total_ops"] == 694
    assert p["full_delegation"] is False and p["accelerated"] is False
    assert classify(p, accelerator="cpu") == (None, None)


def test_real_zero_throughput_output_is_a_failure_despite_exit_0():
    header, out, err = cli_fixture("local_zero_throughput.txt")
    assert "exit_code=0" in header  # the CLI said nothing was wrong
    p = parse_cli_benchmark(out, err)
    assert p["has_results"] and p["prefill_tokens_per_s"] == 0.0 and p["decode_tokens_per_s"] == 0.0
    cls, error = classify(p, accelerator="cpu")
    assert cls == "zero_throughput"
    assert "Input token ids are too long" in error and "96 >= 64" in error


@pytest.mark.parametrize("name,accelerator,cls,text", [
    ("local_gpu_no_adapter.txt", "gpu", "engine_create_failed", "Failed to create engine"),
    ("local_npu_unsupported.txt", "npu", "engine_create_failed", "NPU is supported only for"),
    ("local_truncated_bundle.txt", "cpu", "load_failed", "Failed to map section"),
    ("local_missing_model.txt", "cpu", "load_failed", "Could not find"),
])
def test_real_failing_outputs_are_classified(name, accelerator, cls, text):
    header, out, err = cli_fixture(name)
    assert "exit_code=0" in header
    p = parse_cli_benchmark(out, err)
    assert not p["has_results"] and p["prefill_tokens_per_s"] is None
    got, error = classify(p, accelerator=accelerator)
    assert got == cls and text in error


def test_gpu_failure_names_the_runtime_reason():
    _, out, err = cli_fixture("local_gpu_no_adapter.txt")
    _, error = classify(parse_cli_benchmark(out, err), accelerator="gpu")
    assert "No adapters found" in error or "WebGPU" in error


def test_cpu_numbers_for_a_gpu_request_are_a_silent_fallback():
    # the real CPU run's lines are what a GPU request that fell back to the CPU would leave
    _, out, err = cli_fixture("local_benchmark_ok.txt")
    p = parse_cli_benchmark(out, err)
    assert classify(p, accelerator="gpu")[0] == "silent_cpu_fallback"
    p["backend"] = None  # output without the CLI header: judged by the delegate lines alone
    cls, error = classify(p, accelerator="gpu")
    assert cls == "silent_cpu_fallback" and "TfLiteXNNPackDelegate" in error
    no_lines = parse_cli_benchmark(out, "")
    no_lines["backend"] = None
    assert classify(no_lines, accelerator="gpu") == ("silent_cpu_fallback", "gpu requested, no non-CPU delegate took a node (no delegation line)")


def test_an_unseen_error_is_a_run_error_with_its_text():
    # synthetic text on purpose: a string no table entry knows must come back verbatim, unclassified
    out = "Benchmarking model: x\nRunning warmup..\nAn error occurred during benchmarking\n"
    err = "Traceback (most recent call last):\nRuntimeError: frobnicator exploded at step 3\n"
    assert classify(parse_cli_benchmark(out, err), accelerator="cpu") == ("run_error", "RuntimeError: frobnicator exploded at step 3")
    assert classify(parse_cli_benchmark("", ""), accelerator="cpu") == ("run_error", "no results block in the output")


def test_runner_verdicts_take_precedence():
    _, out, err = cli_fixture("local_benchmark_ok.txt")
    p = parse_cli_benchmark(out, err)
    assert classify(p, accelerator="cpu", timed_out=True)[0] == "timeout"
    assert classify(p, accelerator="cpu", guard_stopped=True)[0] == "does_not_fit"
    assert classify(p, accelerator="cpu", transport_error="ssh pi@x:22 failed: Connection refused") == (
        "device_error", "ssh pi@x:22 failed: Connection refused")
    empty = parse_cli_benchmark("", "")
    assert classify(empty, accelerator="cpu", signal=9)[0] == "out_of_memory"
    assert classify(empty, accelerator="cpu", signal=11) == ("run_error", "killed by signal 11")


def test_failure_classes_are_closed():
    assert set(FAILURE_CLASSES) == {
        "engine_create_failed", "zero_throughput", "load_failed", "run_error", "timeout", "device_error",
        "out_of_memory", "silent_cpu_fallback", "does_not_fit", "host_down"}
    assert {c for c, _, _ in parse.KNOWN_ERRORS} <= set(FAILURE_CLASSES)
    for name in DATA.glob("local_*.txt"):
        _, out, err = cli_fixture(name.name)
        for acc in ("cpu", "gpu", "npu"):
            assert classify(parse_cli_benchmark(out, err), accelerator=acc)[0] in (None, *FAILURE_CLASSES)


def test_iteration_failure_inside_an_average_is_caught():
    # the CLI averages --runs; a failed iteration contributes 0 and leaves a "Failed to generate" line
    _, out, err = cli_fixture("local_benchmark_ok.txt")
    _, _, zerr = cli_fixture("local_zero_throughput.txt")
    failed = next(ln for ln in zerr.splitlines() if "Failed to generate content" in ln)
    cls, error = classify(parse_cli_benchmark(out, err + failed + "\n"), accelerator="cpu")
    assert cls == "zero_throughput" and error == failed.strip()


# --- Android: replay of the seeds' real lines ---------------------------------------------------


def test_replay_s26_gpu_full_delegation_litert_cl():
    p = parse_android_benchmark(replay("replay_s26_gpu_seed004.txt"))
    assert [(d["delegated"], d["total"], d["subgraph"], d["subgraph_name"]) for d in p["delegation"]] == [
        (25703, 25703, 0, "prefill_1024"), (18791, 18791, 1, "prefill_256"),
        (16775, 16775, 2, "prefill_64"), (16865, 16865, 3, "prefill_16")]
    # the seed's own record: delegated_ops 25703, total_ops 25703, full_delegation true
    assert (p["delegated_ops"], p["total_ops"], p["full_delegation"]) == (25703, 25703, True)
    assert p["delegate"] == "LITERT_CL" and p["accelerated"] is True
    assert all(d["partitions"] == 1 for d in p["delegation"])
    # no raw results block is quoted in the seeds: no numbers, and no guessed verdict of success
    assert not p["has_results"] and p["prefill_tokens_per_s"] is None
    assert classify(p, accelerator="gpu") == ("run_error", "no results block in the output")


def test_replay_s26_cpu_xnnpack_partial_delegation():
    p = parse_android_benchmark(replay("replay_s26_cpu_seed004.txt"))
    # the seed's own record: delegated_ops 24542, total_ops 25703, full_delegation false
    assert (p["delegated_ops"], p["total_ops"], p["full_delegation"]) == (24542, 25703, False)
    assert p["delegate"] == "TfLiteXNNPackDelegate" and p["accelerated"] is False
    assert [d["partitions"] for d in p["delegation"]] == [2245, 2209, 2209, 2209]
    assert sum(d["delegated"] for d in p["delegation"]) == 24542 + 17648 + 15632 + 15722


def test_replay_s26_cpu_lines_under_a_gpu_request_would_be_a_fallback():
    p = parse_android_benchmark(replay("replay_s26_cpu_seed004.txt"))
    p.update(has_results=True, prefill_tokens_per_s=1.0, decode_tokens_per_s=1.0)  # any positive figures
    assert classify(p, accelerator="gpu")[0] == "silent_cpu_fallback"
    assert classify(p, accelerator="cpu") == (None, None)


def test_android_benchmarkinfo_format_from_source():
    text = (DATA / "android_format_from_source.txt").read_text()
    assert "NOT recorded output" in text
    p = parse_android_benchmark(text.split("=== output ===\n", 1)[1])
    assert p["runs"] == 3
    assert [i["prefill_tokens_per_s"] for i in p["iterations"]] == [200.0, 500.0, 400.0]
    assert (p["prefill_tokens_per_s"], p["decode_tokens_per_s"], p["ttft_ms"]) == (450.0, 18.0, 630.0)
    assert p["init_ms"] == 8400.0 and (p["prefill_tokens"], p["decode_tokens"]) == (256, 64)
    assert p["peak_mem_mb"] == 2710.5 and p["has_results"]
    assert classify(p, accelerator="cpu") == (None, None)


def test_absl_duration_parsing():
    assert parse._duration_s("1.28s") == 1.28 and parse._duration_s("512ms") == pytest.approx(0.512)
    assert parse._duration_s("1m2.5s") == 62.5 and parse._duration_s("bogus") is None


def test_adb_transport_errors_are_device_errors():
    for line in ("adb: device 'R5CY123' not found", "error: no devices/emulators found", "error: device offline"):
        assert parse.find_errors(line)[0]["class"] == "device_error", line
        assert classify(parse_android_benchmark(line), accelerator="gpu")[0] == "device_error"


# --- runners: command construction ---------------------------------------------------------------


def test_cli_argv_mirrors_the_protocol():
    argv = litert_lm_argv("/tc/bin/litert-lm", "/w/b.litertlm",
                          BenchProtocol(prefill_tokens=32, decode_tokens=24, runs=2, cache_mode="memory",
                                        threads=4, max_num_tokens=64), "cpu")
    assert argv == ["/tc/bin/litert-lm", "benchmark", "/w/b.litertlm", "-p", "32", "-d", "24", "--runs", "2",
                    "--backend", "cpu", "--cache", "memory", "--verbose", "--max-num-tokens", "64",
                    "--cpu-thread-count", "4"]
    gpu = litert_lm_argv("litert-lm", "m", BenchProtocol(threads=4, warmup=False), "gpu")
    assert "--cpu-thread-count" not in gpu and gpu[-1] == "--skip-warmup"


def test_local_runner_finds_the_cli_next_to_the_toolchain_python():
    reg = load_registry(REPO / "infra" / "devices.yaml")
    r = LocalRunner(reg.get("local-cpu"), "/opt/tc/bin/python")
    assert r.litert_lm == Path("/opt/tc/bin/litert-lm")


def test_ssh_command_construction():
    reg = load_registry(REPO / "infra" / "devices.yaml")
    r = SshRunner(reg.get("raspberry-pi-5"))
    argv = r.ssh_argv("true")
    assert argv[:3] == ["ssh", "-p", "22"] and argv[-2:] == ["pi@pi5.example.lan", "true"]
    for opt in ("BatchMode=yes", "StrictHostKeyChecking=accept-new", "ConnectTimeout=10", "IdentitiesOnly=yes"):
        assert opt in argv
    assert argv[argv.index("-i") + 1] == str(Path("~/.ssh/farm_pi5").expanduser())
    scp = r.scp_argv("/x/b.litertlm", "/home/pi/litertlm-farm/bundles/b.part")
    assert scp[:4] == ["scp", "-q", "-P", "22"] and scp[-1] == "pi@pi5.example.lan:/home/pi/litertlm-farm/bundles/b.part"


def test_adb_command_construction_mirrors_the_seeds():
    reg = load_registry(REPO / "infra" / "devices.yaml")
    s26 = reg.get("galaxy-s26")
    r = AdbRunner(s26)
    remote = "/data/local/tmp/litertlm-farm/bundles/abc.litertlm"
    args = r.binary_args(remote, s26.protocol, "gpu")
    assert args == [
        "/data/local/tmp/litertlm-farm/litert_lm_advanced_main", f"--model_path={remote}", "--backend=gpu",
        "--benchmark", "--benchmark_prefill_tokens=256", "--benchmark_decode_tokens=64", "--num_iterations=3",
        "--report_peak_memory_footprint", "--disable_cache"]
    # the seeds' wording: --benchmark_prefill_tokens=256 --benchmark_decode_tokens=64 --num_iterations=3
    seed = (Path("/work/shared/seeds") / "000_7b079141797b4900.txt")
    if seed.exists():
        assert "--benchmark_prefill_tokens=256 --benchmark_decode_tokens=64 --num_iterations=3" in seed.read_text()
    cmd = r.run_command(remote, s26.protocol, "gpu")
    assert cmd.startswith("cd /data/local/tmp/litertlm-farm && echo @@farm-pid=$$ && exec ")
    assert r.shell_argv(cmd)[:4] == ["adb", "-s", "FILL-IN-S26-SERIAL", "shell"]
    pi = BenchProtocol(cache_mode="memory", threads=4, max_num_tokens=1024)
    cpu = r.binary_args(remote, pi, "cpu")
    assert cpu[-3:] == ["--max_num_tokens=1024", "--num_cpu_threads=4", "--cache_dir=:memory"]
    assert "--num_cpu_threads=4" not in r.binary_args(remote, pi, "gpu")


def test_android_env_parsing():
    reg = load_registry(REPO / "infra" / "devices.yaml")
    text = ("ro.product.manufacturer=samsung\nro.product.model=SM-S942Q\nro.build.version.release=16\n"
            "ro.soc.manufacturer=Qualcomm\nro.soc.model=SM8850\nkernel=6.6.30\nMemTotal:       11954176 kB\n")
    env = parse_android_env(text, reg.get("galaxy-s26").runner)
    assert env["device_model"] == "samsung SM-S942Q" and env["soc"] == "Qualcomm SM8850"
    assert env["os"] == "Android 16" and env["ram_mb"] == 11674
    assert env["runtime_version"] is None and env["runtime_label"] == "prebuilt litert_lm_advanced_main 2026-09-18"
    env = parse_android_env(text + "0123456789abcdef" * 4 + "  /data/local/tmp/litertlm-farm/litert_lm_advanced_main\n",
                            reg.get("galaxy-s26").runner)
    assert env["runtime_version"] == "bin-sha256:0123456789abcdef" and len(env["runtime_version"]) <= 32


def test_wrapper_line_is_split_from_stderr():
    err, info = split_wrapper_output('a\nb\n@@farm-run {"exit_code": 0, "peak_rss_kb": 2048}\n')
    assert err == "a\nb\n" and info == {"exit_code": 0, "peak_rss_kb": 2048}


def test_wrapper_line_after_a_partial_line_of_a_killed_benchmark_is_still_found():
    # CI saw this: the benchmark was killed after writing "VERBOSE: " with no newline.
    err, info = split_wrapper_output('a\nVERBOSE: @@farm-run {"exit_code": null, "signal": 9}\n')
    assert err == "a\nVERBOSE: \n" and info == {"exit_code": None, "signal": 9}
    err, info = split_wrapper_output("VERBOSE: @@farm-start\nb\n")
    assert err == "VERBOSE: \nb\n" and info is None
    # negative control: a mark that is not followed by JSON is not a report
    err, info = split_wrapper_output("x @@farm-run not json\n")
    assert info is None and err == "x @@farm-run not json\n"


def test_collect_uses_the_parsed_output_not_the_exit_code():
    reg = load_registry(REPO / "infra" / "devices.yaml")
    r = LocalRunner(reg.get("local-cpu"), "/opt/tc/bin/python")
    _, out, err = cli_fixture("local_zero_throughput.txt")
    rec = r.collect(RunOutput(out, err, 0, 120.0, 0.5, False), BenchProtocol(prefill_tokens=96, decode_tokens=24, runs=1), "cpu")
    assert rec["exit_code"] == 0 and rec["ok"] is False and rec["failure_class"] == "zero_throughput"
    _, out, err = cli_fixture("local_benchmark_ok.txt")
    rec = r.collect(RunOutput(out, err, 0, 123.4, 0.5, False), BenchProtocol(prefill_tokens=32, decode_tokens=24, runs=1), "cpu")
    assert rec["ok"] and rec["peak_mem_mb"] == 123.4 and rec["prefill_tokens_per_s"] > 0
    assert any(ln.startswith("Prefill speed:") for ln in rec["evidence"])
    assert any("Replacing" in ln for ln in rec["evidence"])


# --- registry ------------------------------------------------------------------------------------


def test_shipped_registry():
    reg = load_registry(REPO / "infra" / "devices.yaml")
    classes = ["cpu-x86-avx2", "cpu-x86-avx512", "cpu-arm64-dotprod", "cpu-arm64-armv9"]
    assert set(reg.devices) == {"local-cpu", "raspberry-pi-5", "galaxy-s26", "pixel-8a", *classes}
    assert [d.id for d in reg.enabled()] == ["local-cpu", *classes]
    assert reg.targets() == [(reg.get(d), "cpu") for d in ["local-cpu", *classes]]
    # The CPU classes a file is verified on by default (issue 34): each optional, so a host that
    # cannot present one leaves it out instead of refusing every build.
    assert [(reg.get(c).runner.kind, reg.get(c).runner.cpu_class, reg.get(c).runner.optional) for c in classes] == [
        ("cpuid_mask", "x86-avx2", True), ("cpuid_mask", "x86-avx512", True),
        ("qemu_arm64", "arm64-dotprod", True), ("qemu_arm64", "arm64-armv9", True)]
    local = reg.get("local-cpu")
    assert local.ram_mb and local.ram_mb > 0 and local.soc and local.os  # filled from this host
    pi = reg.get("raspberry-pi-5")
    assert pi.runner.kind == "ssh" and pi.protocol.cache_mode == "memory" and pi.protocol.threads == 4
    assert pi.protocol.prefill_tokens == 256  # from the file's defaults
    s26 = reg.get("galaxy-s26")
    assert s26.runner.kind == "adb" and s26.soc == "Qualcomm SM8850" and set(s26.accelerators) == {"cpu", "gpu"}
    assert reg.get("pixel-8a").soc == "Google Tensor G3" and reg.get("pixel-8a").protocol.min_free_kb == 400000
    assert s26.queue == "galaxy-s26" and s26.work_pool == "devices"


def test_local_cpu_is_synthesized_when_absent(tmp_path):
    f = tmp_path / "devices.yaml"
    f.write_text("devices: []\n")
    reg = load_registry(f)
    d = reg.get("local-cpu")
    assert d.runner.kind == "local" and d.accelerators == ["cpu"] and d.ram_mb > 0
    assert load_registry(f, synthesize_local=False).devices == {}


@pytest.mark.parametrize("body,needle", [
    ("devices:\n  - id: pi\n    name: p\n    accelerators: [cpu]\n    runner: {kind: ssh, host: h, user: u}\n",
     "devices[0] (pi): runner.key_path: Field required"),
    ("devices:\n  - id: x\n    name: x\n    accelerators: [tpu]\n    runner: {kind: local}\n", "accelerators.0"),
    ("devices:\n  - id: x\n    name: x\n    accelerators: [cpu]\n    runner: {kind: telnet}\n", "runner"),
    ("devices:\n  - {id: a, name: a, accelerators: [cpu], runner: {kind: local}}\n"
     "  - {id: a, name: b, accelerators: [cpu], runner: {kind: local}}\n", "listed twice"),
    ("devices:\n  - {id: a, name: a, accelerators: [cpu], runner: {kind: local}, protocol: {prefill_tokens: 60, decode_tokens: 10, max_num_tokens: 64}}\n",
     "exceed max_num_tokens"),
    ("devices:\n  - {id: Bad_Id, name: a, accelerators: [cpu], runner: {kind: local}}\n", "id"),
    ("devices: [\n", "not readable YAML"),
    ("gadgets: []\n", "unknown top-level key"),
])
def test_bad_registry_is_one_badinput_line(tmp_path, body, needle):
    f = tmp_path / "devices.yaml"
    f.write_text(body)
    with pytest.raises(BadInput) as e:
        load_registry(f)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg and needle in msg


def test_missing_registry_and_unknown_device(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        load_registry(tmp_path / "nope.yaml")
    with pytest.raises(BadInput, match="unknown device 'iphone'"):
        load_registry(REPO / "infra" / "devices.yaml").get("iphone")


def test_protocol_fit_context():
    p = BenchProtocol()  # 256 + 256
    fit = p.fit_context(64)
    assert fit.prefill_tokens + fit.decode_tokens < 64 and fit.max_num_tokens == 64
    assert fit.prefill_tokens > 0 and fit.decode_tokens > 0
    small = BenchProtocol(prefill_tokens=32, decode_tokens=24, max_num_tokens=64)
    assert small.fit_context(64) is small


def test_a_sigkill_at_a_sliver_of_the_devices_memory_is_not_called_out_of_memory():
    """A SIGKILL the runner did not send reads as the OOM killer's; at a peak far under the
    device's RAM it was sent from outside (kill -9 mid-benchmark: tests/integration/test_runners.py),
    and the record says so instead of claiming the file does not fit. The negative control: near
    the device's RAM the same kill stays out_of_memory."""
    reg = load_registry(REPO / "infra" / "devices.yaml")
    dev = reg.get("local-cpu").model_copy(update={"ram_mb": 8000})
    r = LocalRunner(dev, "/opt/tc/bin/python")
    proto = BenchProtocol(prefill_tokens=32, decode_tokens=24, runs=1)
    small = r.collect(RunOutput("", "", None, 150.0, 3.0, False, signal=9), proto, "cpu")
    assert small["failure_class"] == "run_error" and "killed by SIGKILL from outside" in small["error"]
    big = r.collect(RunOutput("", "", None, 7900.0, 3.0, False, signal=9), proto, "cpu")
    assert big["failure_class"] == "out_of_memory"


def test_a_cpu_class_device_names_a_class_its_runner_presents(tmp_path):
    f = tmp_path / "devices.yaml"
    f.write_text("devices:\n  - {id: arm, name: arm, accelerators: [cpu], runner: {kind: qemu_arm64, cpu_class: arm64-dotprod}}\n"
                 "  - {id: avx2, name: avx2, accelerators: [cpu], runner: {kind: cpuid_mask, cpu_class: x86-avx2}}\n")
    reg = load_registry(f)
    assert reg.get("arm").runner.max_bundle_mb == 64 and reg.get("avx2").runner.optional is False
    # The negative control: an x86 class under the qemu runner is bad input naming the classes it has.
    f.write_text("devices:\n  - {id: arm, name: arm, accelerators: [cpu], runner: {kind: qemu_arm64, cpu_class: x86-avx2}}\n")
    with pytest.raises(BadInput, match="not a class presented by qemu .one of arm64-dotprod, arm64-armv9"):
        load_registry(f)
