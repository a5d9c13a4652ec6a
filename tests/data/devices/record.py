"""Re-record the local_*.txt fixtures from REAL runs of the `litert-lm benchmark` CLI on this host.

    PYTHONPATH=. .venv/bin/python tests/data/devices/record.py BUNDLE.litertlm [TOOLCHAIN_PYTHON]

Each fixture is a header of `#` lines (how it was made), then `=== stdout ===` and `=== stderr ===`
sections holding what the run printed, byte for byte (decoded as UTF-8). The runner's own wrapper line
(peak RSS) is not part of stderr; its figures are in the header.
"""

from __future__ import annotations

import datetime as dt
import shlex
import sys
from pathlib import Path

from farm.devices.protocol import BenchProtocol
from farm.devices.registry import local_device
from farm.devices.runners.local import LocalRunner, file_sha256

HERE = Path(__file__).resolve().parent

OK = BenchProtocol(prefill_tokens=32, decode_tokens=24, max_num_tokens=64, runs=1, timeout_s=300)


def write(name: str, runner: LocalRunner, model: str, protocol: BenchProtocol, accelerator: str, why: str) -> None:
    out = runner.run(model, protocol, accelerator)
    facts = runner.env()
    head = [
        f"# {name}: REAL output of the litert-lm CLI, recorded by tests/data/devices/record.py",
        f"# recorded {dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()} on {facts.get('soc')} "
        f"({facts.get('cpu_count')} CPUs), {facts.get('os_build')}",
        f"# runtime: {facts.get('runtime_version_text')}",
        f"# scenario: {why}",
        f"# command: {shlex.join(out.command)}",
        f"# exit_code={out.exit_code} signal={out.signal} timed_out={out.timed_out} seconds={out.seconds} "
        f"peak_rss_mb={out.peak_rss_mb} (wait4 ru_maxrss)",
    ]
    stdout = out.stdout if out.stdout.endswith("\n") or not out.stdout else out.stdout + "\n"
    stderr = out.stderr
    text = "\n".join(head) + "\n=== stdout ===\n" + stdout + "=== stderr ===\n" + stderr
    (HERE / f"{name}.txt").write_text(text)
    print(f"wrote {name}.txt ({len(text)} chars, exit {out.exit_code})")


def main() -> None:
    bundle = Path(sys.argv[1])
    tc = sys.argv[2] if len(sys.argv) > 2 else None
    runner = LocalRunner(local_device(), tc)
    try:
        good = runner.push(bundle, file_sha256(bundle))
        write("local_benchmark_ok", runner, good, OK, "cpu",
              "the tiny Qwen3.5 bundle (examples/tiny-qwen35.yaml, KV cache 64), -p 32 -d 24 --max-num-tokens 64, CPU")
        write("local_zero_throughput", runner, good,
              BenchProtocol(prefill_tokens=96, decode_tokens=24, runs=1, timeout_s=300), "cpu",
              "a prompt longer than the bundle's 64-token KV cache: the CLI exits 0 and prints 0.00 tokens/s")
        write("local_gpu_no_adapter", runner, good, OK, "gpu",
              "--backend gpu on a host with no GPU / no Vulkan loader: engine creation fails")
        write("local_npu_unsupported", runner, good, OK, "npu", "--backend npu on Linux")
        trunc = runner.work / "truncated.litertlm"
        trunc.write_bytes(bundle.read_bytes()[:700_000])
        write("local_truncated_bundle", runner, str(trunc), OK, "cpu",
              "the tiny bundle cut to its first 700,000 bytes")
        write("local_missing_model", runner, str(runner.work / "does-not-exist.litertlm"), OK, "cpu",
              "a model path that does not exist")
    finally:
        runner.cleanup()


if __name__ == "__main__":
    main()
