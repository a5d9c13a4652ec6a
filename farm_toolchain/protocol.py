"""The subprocess protocol between the orchestrator and the toolchain env.

Request: one JSON object on stdin. Result: one JSON object on the process's *original* stdout.
Everything the libraries print (litert-torch progress bars, absl logs, print() calls) goes to
stderr, which the orchestrator streams live as progress. To keep stray prints from corrupting the
result, `run()` moves fd 1 onto fd 2 before any command runs and writes the result to a private
duplicate of the original stdout.

Result shape: {"ok": true, ...command fields} or {"ok": false, "error": "<one line>",
"error_kind": "bad_input" | "failed"}; exit code 0, 2 (bad input) or 1 (failed).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Callable


class BadInput(Exception):
    """The request names something that does not exist or cannot be used (exit code 2)."""


def progress(message: str) -> None:
    """One progress line for the orchestrator to show while the command runs."""
    print(f"[toolchain] {message}", file=sys.stderr, flush=True)


def run(handler: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    result_fd = os.dup(1)
    os.dup2(2, 1)  # library prints now land on stderr
    sys.stdout = sys.stderr
    code = 0
    try:
        request = json.load(sys.stdin)
        result = {"ok": True, **handler(request)}
    except BadInput as exc:
        result, code = {"ok": False, "error": str(exc), "error_kind": "bad_input"}, 2
    except Exception as exc:  # noqa: BLE001 - reported to the orchestrator as one line
        traceback.print_exc(file=sys.stderr)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        result = {"ok": False, "error": f"{type(exc).__name__}: {first}", "error_kind": "failed"}
        code = 1
    with os.fdopen(result_fd, "w") as out:
        json.dump(result, out)
        out.write("\n")
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: TF/absl atexit hooks are slow and noisy
