"""Pure parsers for what LiteRT-LM benchmark runs print, and the closed failure taxonomy.

Two producers:
- the desktop/Linux `litert-lm benchmark` CLI (the Python package's click command): a header
  ("Backend : cpu", "Number of tokens in prefill: 32", ...), then a results block
  ("----- Results -----", "Prefill speed: 4640.53 tokens/s", "Decode speed: ...", "Init time:
  0.0104 s", "Time to first token: 0.0072 s"). It exits 0 even when a run fails: a failed engine
  prints "An error occurred during benchmarking" and a traceback; a failed generation still prints
  the block with 0.00 tokens/s. So success is judged from the parsed output, never the exit code.
- the Android binaries `litert_lm_main` / `litert_lm_advanced_main --benchmark`: BenchmarkInfo blocks
  (format of LiteRT-LM runtime/engine/io_types.cc `operator<<(BenchmarkInfo)`: "Prefill Turn 1:
  Processed 256 tokens in 1.2s duration.", "Prefill Speed: 450.06 tokens/sec.", "Time to first
  token: 0.52 s", "- Init Total: 1234.00 ms"), one per --num_iterations, and with
  --report_peak_memory_footprint "Peak system ram usage: 3310.5MB.".
Both print TFLite's delegation lines (the desktop CLI with --verbose):
  "VERBOSE: Replacing 25703 out of 25703 node(s) with delegate (LITERT_CL) node, yielding 1
   partitions for subgraph 0 (prefill_1024)."

Failure classes (closed): see FAILURE_CLASSES. Only error texts seen in real output (listed in
KNOWN_ERRORS with where they were seen) map to a class; an unseen error text is `run_error` carrying
that text, never a guess.
"""

from __future__ import annotations

import re
import statistics
from typing import Any

FAILURE_CLASSES = (
    "engine_create_failed",  # the runtime could not build the engine (delegate init, bad bundle contents)
    "zero_throughput",  # a results block with 0 tokens/s, or an iteration that failed to generate
    "load_failed",  # the bundle could not be found / mapped / read
    "run_error",  # anything else, with its text
    "timeout",  # the runner's time limit stopped it
    "device_error",  # the device could not be reached or refused (ssh/adb transport, push mismatch)
    "out_of_memory",  # killed by SIGKILL not sent by the runner (the OOM killer), or an allocation error
    "silent_cpu_fallback",  # GPU/NPU requested, numbers came back, but no non-CPU delegate took any node
    "does_not_fit",  # the runner's free-memory guard stopped the run (the seeds' 400,000 KiB line)
    "host_down",  # the host the device belongs to has no live worker on its queue: no verdict on the file
)

# CPU delegates (TFLite's own XNNPACK; YNNPACK is the CPU-side alternative of --enable_ynnpack).
CPU_DELEGATES = re.compile(r"xnnpack|ynnpack", re.I)

DELEGATION = re.compile(
    r"Replacing (?P<delegated>\d+) out of (?P<total>\d+) node\(s\) with delegate \((?P<delegate>[^)]*)\) node"
    r"(?:, yielding (?P<partitions>\d+) partitions?)?"
    r"(?: for subgraph (?P<subgraph>\d+)(?: \((?P<name>[^)]*)\))?)?"
)

_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)"

# --- desktop CLI ---------------------------------------------------------------------------------
CLI_HEADER = {
    "backend": re.compile(r"^Backend\s*:\s*(\S+)\s*$", re.M),
    "prefill_tokens": re.compile(r"^Number of tokens in prefill\s*:\s*(\d+)\s*$", re.M),
    "decode_tokens": re.compile(r"^Number of tokens in decode\s*:\s*(\d+)\s*$", re.M),
    "max_num_tokens": re.compile(r"^Max number of tokens\s*:\s*(\d+)\s*$", re.M),
    "cache": re.compile(r"^Cache\s*:\s*(\S+)\s*$", re.M),
}
CLI_RESULTS_MARK = "----- Results -----"
CLI_RESULTS = {
    "prefill_tokens_per_s": re.compile(rf"^Prefill speed:\s*{_NUM} tokens/s\s*$", re.M),
    "decode_tokens_per_s": re.compile(rf"^Decode speed:\s*{_NUM} tokens/s\s*$", re.M),
    "init_s": re.compile(rf"^Init time:\s*{_NUM} s\s*$", re.M),
    "ttft_s": re.compile(rf"^Time to first token:\s*{_NUM} s\s*$", re.M),
}
CLI_ITERATION = re.compile(r"^Running iteration (\d+) of (\d+)\.\.\s*$", re.M)

# --- Android binary ------------------------------------------------------------------------------
ANDROID = {
    "prefill_turn": re.compile(r"Prefill Turn (\d+): Processed (\d+) tokens in (\S+) duration\."),
    "prefill_speed": re.compile(rf"Prefill Speed: {_NUM} tokens/sec\."),
    "decode_turn": re.compile(r"Decode Turn (\d+): Processed (\d+) tokens in (\S+) duration\."),
    "decode_speed": re.compile(rf"Decode Speed: {_NUM} tokens/sec\."),
    "ttft": re.compile(rf"Time to first token: {_NUM} s"),
    "init_phase": re.compile(rf"^\s*- (?P<phase>[^:\n]+): {_NUM} ms\s*$", re.M),
    # the log-sink variant of LogBenchmarkInfo (litert_lm_lib.cc)
    "prefill_speed_sink": re.compile(rf"Prefill speed turn (\d+): {_NUM} tk/s"),
    "decode_speed_sink": re.compile(rf"Decode speed turn (\d+): {_NUM} tk/s"),
    "peak_ram": re.compile(rf"Peak system ram usage: {_NUM} ?MB"),
    "peak_private": re.compile(rf"Peak private footprint: {_NUM} ?MB"),
}

# --- errors: (class, pattern, where it was seen) -------------------------------------------------
KNOWN_ERRORS: list[tuple[str, re.Pattern[str], str]] = [
    ("load_failed", re.compile(r"Could not find .+ locally in .+"),
     "litert-lm 0.18.1 CLI, a model path that does not exist (stdout)"),
    ("load_failed", re.compile(r"Failed to map section: .+"),
     "litert-lm 0.18.1, a truncated .litertlm (tests/data/devices/local_truncated_bundle.txt)"),
    ("load_failed", re.compile(r"Invalid magic number or failed to read.*"),
     "litert-lm 0.18.1, a file of random bytes named .litertlm"),
    ("engine_create_failed", re.compile(r"Failed to create engine.*"),
     "litert-lm 0.18.1, GPU backend on a host with no GPU adapter (tests/data/devices/local_gpu_no_adapter.txt)"),
    ("engine_create_failed", re.compile(r"NPU is supported only for .+"),
     "litert-lm 0.18.1 CLI, --backend npu on Linux (tests/data/devices/local_npu_unsupported.txt)"),
    ("engine_create_failed", re.compile(r"Failed to create session for benchmark.*"),
     "litert_lm/benchmark.py 0.18.1 raises it when litert_lm_engine_create_session returns null"),
    ("zero_throughput", re.compile(r"Failed to generate content: .+"),
     "litert-lm 0.18.1, prompt longer than --max-num-tokens (tests/data/devices/local_zero_throughput.txt)"),
    # Allocation failures, by the texts libstdc++ / libc / CPython print for them (not litert-lm's).
    ("out_of_memory", re.compile(r"std::bad_alloc|Cannot allocate memory|\bMemoryError\b"),
     "libstdc++ / strerror(ENOMEM) / CPython allocation failures"),
    # adb client transport errors (adb's own messages).
    ("device_error", re.compile(r"^(?:adb: )?(?:error: )?(?:device '[^']*' not found|device (?:still )?(?:offline|unauthorized)\b.*|no devices/emulators found|closed$)"),
     "adb client"),
]

# Lines that count as errors when nothing above matches (their text is the run_error).
GENERIC_ERROR = re.compile(
    r"^(?:E\d{4} [^\]]*\] .+|ERROR: .+|\w*Error: .+|An error occurred during benchmarking.*|Fatal signal .+|Segmentation fault.*|Aborted.*)$",
    re.M,
)
# ERROR lines the runtime prints on healthy runs too (not failures).
BENIGN = [
    re.compile(r"Failed to get GpuArtisanConfig to set use_ringbuffers_local_attention"),
]


def _f(s: str) -> float:
    return float(s)


def _clean(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --- delegation ----------------------------------------------------------------------------------


def parse_delegation(text: str) -> list[dict[str, Any]]:
    """Every delegation line, in order, with its verbatim text."""
    out = []
    for line in _clean(text).splitlines():
        m = DELEGATION.search(line)
        if m:
            out.append({
                "delegated": int(m["delegated"]),
                "total": int(m["total"]),
                "delegate": m["delegate"],
                "partitions": int(m["partitions"]) if m["partitions"] else None,
                "subgraph": int(m["subgraph"]) if m["subgraph"] else None,
                "subgraph_name": m["name"],
                "line": line.strip(),
            })
    return out


def summarize_delegation(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """delegated_ops / total_ops of the largest subgraph (the main prefill signature: the seeds'
    records use that line's figures), full_delegation = every distinct line delegates all its nodes,
    delegate = the delegate names seen ("," joined, first seen first)."""
    if not lines:
        return {"delegated_ops": None, "total_ops": None, "delegate": None, "full_delegation": None,
                "accelerated": None, "delegation_lines": 0}
    distinct = list({(d["subgraph"], d["subgraph_name"], d["delegated"], d["total"], d["delegate"]): d for d in lines}.values())
    main = max(distinct, key=lambda d: d["total"])
    names = list(dict.fromkeys(d["delegate"] for d in distinct))
    return {
        "delegated_ops": main["delegated"],
        "total_ops": main["total"],
        "delegate": ",".join(names),
        "full_delegation": all(d["delegated"] == d["total"] for d in distinct),
        # did any non-CPU delegate take at least one node?
        "accelerated": any(not CPU_DELEGATES.search(d["delegate"]) and d["delegated"] > 0 for d in distinct),
        "delegation_lines": len(distinct),
    }


# --- errors --------------------------------------------------------------------------------------


def find_errors(text: str) -> list[dict[str, str]]:
    """Known error lines (with their class) and other error-looking lines (class None), verbatim."""
    out: list[dict[str, str]] = []
    seen = set()
    for line in _clean(text).splitlines():
        s = line.strip()
        if not s or s in seen or any(b.search(s) for b in BENIGN):
            continue
        for cls, pat, _where in KNOWN_ERRORS:
            if pat.search(s):
                out.append({"class": cls, "line": s})
                seen.add(s)
                break
        else:
            if GENERIC_ERROR.match(s):
                out.append({"class": None, "line": s})
                seen.add(s)
    return out


# --- desktop CLI ---------------------------------------------------------------------------------


def parse_cli_benchmark(stdout: str, stderr: str = "") -> dict[str, Any]:
    """Parse `litert-lm benchmark` output into a record-like dict (numbers None when absent)."""
    stdout, stderr = _clean(stdout), _clean(stderr)
    rec: dict[str, Any] = {"format": "litert-lm-cli"}
    for key, pat in CLI_HEADER.items():
        m = pat.search(stdout)
        rec[key] = (int(m[1]) if key.endswith("tokens") else m[1]) if m else None
    iters = CLI_ITERATION.findall(stdout)
    rec["runs"] = int(iters[-1][1]) if iters else None
    results_at = stdout.find(CLI_RESULTS_MARK)
    block = stdout[results_at:] if results_at >= 0 else ""
    vals = {k: (_f(m[1]) if (m := pat.search(block)) else None) for k, pat in CLI_RESULTS.items()}
    rec["has_results"] = results_at >= 0 and vals["prefill_tokens_per_s"] is not None and vals["decode_tokens_per_s"] is not None
    rec["prefill_tokens_per_s"] = vals["prefill_tokens_per_s"]
    rec["decode_tokens_per_s"] = vals["decode_tokens_per_s"]
    rec["init_ms"] = round(vals["init_s"] * 1000, 3) if vals["init_s"] is not None else None
    rec["ttft_ms"] = round(vals["ttft_s"] * 1000, 3) if vals["ttft_s"] is not None else None
    rec["results_lines"] = [ln.strip() for ln in block.splitlines() if ln.strip()][:5] if results_at >= 0 else []
    rec["peak_mem_mb"] = None  # the CLI prints no memory figure: the runner measures it
    lines = parse_delegation(stderr + "\n" + stdout)
    rec["delegation"] = lines
    rec.update(summarize_delegation(lines))
    rec["errors"] = find_errors(stdout + "\n" + stderr)
    return rec


# --- Android binary ------------------------------------------------------------------------------


def _duration_s(s: str) -> float | None:
    """absl::Duration text: 1.2s, 567.891ms, 1m2.5s, 850us, 12ns."""
    total, pos = 0.0, 0
    for m in re.finditer(r"([\d.]+)(h|ms|us|ns|m|s)", s):
        if m.start() != pos:
            return None
        total += float(m[1]) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[m[2]]
        pos = m.end()
    return total if pos == len(s) and pos else None


def parse_android_benchmark(output: str) -> dict[str, Any]:
    """Parse litert_lm_main / litert_lm_advanced_main --benchmark output (stdout+stderr together).
    With several BenchmarkInfo blocks (--num_iterations N), the figures are the median of blocks
    2..N (the first is the cold run that pays the engine init, as in the seeds' protocol "median of
    iterations 2-3"); init_ms is taken from the first block."""
    text = _clean(output)
    starts = [m.start() for m in re.finditer(r"BenchmarkInfo:", text)]
    blocks = [text[s:e] for s, e in zip(starts, starts[1:] + [len(text)])]
    iters = []
    for b in blocks:
        it: dict[str, Any] = {}
        pt, ps = ANDROID["prefill_turn"].findall(b), ANDROID["prefill_speed"].findall(b)
        dt, ds = ANDROID["decode_turn"].findall(b), ANDROID["decode_speed"].findall(b)
        it["prefill_tokens"] = int(pt[0][1]) if pt else None
        it["prefill_tokens_per_s"] = _f(ps[0]) if ps else None
        it["decode_tokens"] = int(dt[0][1]) if dt else None
        it["decode_tokens_per_s"] = _f(ds[0]) if ds else None
        m = ANDROID["ttft"].search(b)
        it["ttft_ms"] = round(_f(m[1]) * 1000, 3) if m else None
        phases = {p["phase"].strip(): _f(p[2]) for p in ANDROID["init_phase"].finditer(b)}
        total = phases.get("Init Total")
        it["init_ms"] = total if total is not None else (round(sum(phases.values()), 3) if phases else None)
        it["init_phases_ms"] = phases
        iters.append(it)
    if not iters:  # the log-sink format: one line per figure
        ps, ds = ANDROID["prefill_speed_sink"].findall(text), ANDROID["decode_speed_sink"].findall(text)
        ttft = ANDROID["ttft"].findall(text)
        if ps or ds:
            iters.append({
                "prefill_tokens": None, "decode_tokens": None,
                "prefill_tokens_per_s": _f(ps[0][1]) if ps else None,
                "decode_tokens_per_s": _f(ds[0][1]) if ds else None,
                "ttft_ms": round(_f(ttft[0]) * 1000, 3) if ttft else None,
                "init_ms": None, "init_phases_ms": {},
            })
    rec: dict[str, Any] = {"format": "litert-lm-android", "iterations": iters, "runs": len(iters) or None}
    timed = iters[1:] if len(iters) > 1 else iters

    def med(key: str) -> float | None:
        vals = [i[key] for i in timed if i.get(key) is not None]
        return round(statistics.median(vals), 3) if vals else None

    rec["prefill_tokens_per_s"] = med("prefill_tokens_per_s")
    rec["decode_tokens_per_s"] = med("decode_tokens_per_s")
    rec["ttft_ms"] = med("ttft_ms")
    rec["init_ms"] = iters[0]["init_ms"] if iters else None
    rec["prefill_tokens"] = next((i["prefill_tokens"] for i in iters if i["prefill_tokens"] is not None), None)
    rec["decode_tokens"] = next((i["decode_tokens"] for i in iters if i["decode_tokens"] is not None), None)
    rec["has_results"] = bool(iters) and rec["prefill_tokens_per_s"] is not None and rec["decode_tokens_per_s"] is not None
    peak = ANDROID["peak_ram"].findall(text)
    rec["peak_mem_mb"] = max(_f(x) for x in peak) if peak else None
    priv = ANDROID["peak_private"].findall(text)
    rec["peak_private_mb"] = max(_f(x) for x in priv) if priv else None
    evidence = [ln.strip() for ln in text.splitlines()
                if re.search(r"Prefill Speed:|Decode Speed:|Time to first token:|Peak system ram usage:|Init Total:|speed turn \d+:", ln)]
    rec["results_lines"] = evidence[:24]
    lines = parse_delegation(text)
    rec["delegation"] = lines
    rec.update(summarize_delegation(lines))
    rec["errors"] = find_errors(text)
    return rec


# --- classification ------------------------------------------------------------------------------


def classify(
    parsed: dict[str, Any],
    *,
    accelerator: str,
    timed_out: bool = False,
    guard_stopped: bool = False,
    signal: int | None = None,
    transport_error: str | None = None,
) -> tuple[str | None, str | None]:
    """(failure_class, error text) for one run; (None, None) is a good measurement. The exit code
    plays no part: the CLI exits 0 on failed runs."""
    errors = parsed.get("errors") or []

    def first(cls: str) -> str | None:
        return next((e["line"] for e in errors if e["class"] == cls), None)

    if timed_out:
        return "timeout", "stopped by the runner's time limit"
    if guard_stopped:
        return "does_not_fit", "stopped by the runner's free-memory guard (free memory fell under the protocol's min_free_kb)"
    if transport_error:
        return "device_error", transport_error
    if (line := first("device_error")):
        return "device_error", line
    if signal == 9:
        return "out_of_memory", "killed by SIGKILL, not by the runner (the kernel OOM killer sends it)"
    if (line := first("out_of_memory")):
        return "out_of_memory", line
    if (line := first("load_failed")):
        return "load_failed", line
    if (line := first("engine_create_failed")):
        # the runtime's own reason usually comes a few lines before "Failed to create engine"
        cause = next((e["line"] for e in errors if e["class"] is None and "Failed to" in e["line"]), None)
        return "engine_create_failed", f"{line} (after: {cause})" if cause else line
    if parsed.get("has_results"):
        p, d = parsed.get("prefill_tokens_per_s"), parsed.get("decode_tokens_per_s")
        if not (p and p > 0) or not (d and d > 0):
            return "zero_throughput", first("zero_throughput") or f"prefill {p} tokens/s, decode {d} tokens/s"
        if (line := first("zero_throughput")):
            # an iteration (warm-up or timed) failed to generate: the CLI's average includes a 0
            return "zero_throughput", line
        if accelerator in ("gpu", "npu"):
            backend = parsed.get("backend")
            if backend is not None and backend != accelerator:
                return "silent_cpu_fallback", f"{accelerator} requested, the run reports backend {backend}"
            if not parsed.get("accelerated"):
                what = parsed.get("delegate") or "no delegation line"
                return "silent_cpu_fallback", f"{accelerator} requested, no non-CPU delegate took a node ({what})"
        if signal is not None:
            return "run_error", f"killed by signal {signal}"
        return None, None
    if signal is not None:
        return "run_error", f"killed by signal {signal}"
    if (line := first("zero_throughput")):
        return "zero_throughput", line
    other = [e["line"] for e in errors if e["class"] is None]
    specific = [ln for ln in other if not ln.startswith("An error occurred during benchmarking")]
    if specific:
        return "run_error", specific[-1] if specific[-1].startswith(("RuntimeError", "ValueError")) else specific[0]
    if other:
        return "run_error", other[0]
    return "run_error", "no results block in the output"
