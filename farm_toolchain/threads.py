"""How many threads one toolchain process computes with: the runtime's Engines, the TFLite
Interpreter, torch's intra-op pool.

litert-lm 0.18.1 starts 4 XNNPACK threads per Engine when it is given no count (measured: 4 tasks
in the process after `Engine(..., Backend.CPU())`, 1 with `thread_count=1`), whatever the host has:
on a 2-core host running two toolchain processes that is 8 spinning threads on 2 cores. The count
changes no answer (measured 2026-12-07 on this Intel host: the tiny Qwen3.5's and SmolLM2-135M's
greedy replies byte-identical at 1, 2, 4 threads and the default; docs/findings.md 2026-12-06: the
same on an AMD EPYC), so it is not part of a result's key; it changes only speed, and the benchmark
sets its own (`threads:` in a device's protocol).

The budget: OMP_NUM_THREADS when the process was given one (the share of the cores a caller gives
each of several toolchain processes: the test suite's workers), else the CPUs this process may run
on, at most 4 (the runtime's own default). Standard library only: the runtime host under another CPU
class imports it too."""

from __future__ import annotations

import os

RUNTIME_DEFAULT = 4  # litert-lm's own XNNPACK thread count when none is given (measured above)


def budget() -> int:
    """The threads this process computes with (see the module's docstring)."""
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: every CPU the OS reports
        cpus = os.cpu_count() or 1
    return max(1, min(RUNTIME_DEFAULT, cpus))
