"""The subprocess protocol between the orchestrator and the toolchain env.

Two ways in, one set of command handlers (`handle(request) -> dict` in each command module):

- one-shot, for people and scripts: `python -m farm_toolchain <command>`, one JSON request on stdin,
  one JSON result on stdout, exit code 0 / 2 (bad input) / 1 (failed);
- `python -m farm_toolchain serve`, what the orchestrator uses: one JSON line per request on stdin
  (`{"command": ..., "request": {...}}`), one JSON result line per request on stdout, until stdin
  closes. One process serves a whole build, so torch and litert-torch are imported once instead of
  once per stage (measured: the package stage went from ~4.7 s to well under a second).

Everything the libraries print (litert-torch progress, absl logs, print() calls) goes to stderr, which
the orchestrator streams live as progress: before any command runs, fd 1 is moved onto fd 2 and the
results are written to a private duplicate of the original stdout.

The envelope, DONE_MARKER and BadInput are the wire's (farm_common/wire.py), shared with the
orchestrator: {"ok": true, ...command fields} or {"ok": false, "error": "<one line>",
"error_kind": "bad_input" | "failed"}.

Each request runs under its command's environment (farm_toolchain/commands.py: offline mode for
the commands that must never reach the hub, quiet defaults), set here for that request only and
put back afterwards: nothing sets os.environ at import, so one request's settings never reach the
next one in the same server (a hub fetch after an export), nor a test process that imports a
command module.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, TextIO

from farm_common.wire import DONE_MARKER, BadInput, error_reply, ok_reply, proc_status_bytes

Handler = Callable[[dict[str, Any]], dict[str, Any]]
__all__ = ["DONE_MARKER", "BadInput", "Handler", "at_exit", "handle_one", "progress", "request_env", "run", "serve"]

# What this process must undo before it ends (its private engine folders). The process leaves by
# os._exit, which runs no atexit hook (TF's and absl's are slow and noisy): these run instead.
_AT_EXIT: list[Callable[[], None]] = []


def at_exit(hook: Callable[[], None]) -> None:
    """Run `hook` when this toolchain process ends its requests (once, however often registered)."""
    if hook not in _AT_EXIT:
        _AT_EXIT.append(hook)


def _exit(code: int) -> None:
    for hook in _AT_EXIT:
        try:
            hook()
        except Exception:  # an exit hook never turns a finished request into a failure
            traceback.print_exc()
    sys.stderr.flush()
    os._exit(code)


def progress(message: str) -> None:
    """One progress line for the orchestrator to show while the command runs."""
    print(f"[toolchain] {message}", file=sys.stderr, flush=True)


def _private_stdout() -> TextIO:
    result_fd = os.dup(1)
    os.dup2(2, 1)  # library prints now land on stderr
    sys.stdout = sys.stderr
    return os.fdopen(result_fd, "w")


@contextmanager
def request_env(env: Mapping[str, str] = {}, defaults: Mapping[str, str] = {}) -> Iterator[None]:
    """Run one request under `env` (set whatever the caller's environment says) and `defaults`
    (set only where it says nothing), then put the caller's environment back. huggingface_hub reads
    its offline flag once, at import, into `constants.HF_HUB_OFFLINE`: that copy follows too."""
    saved = {k: os.environ.get(k) for k in {*env, *defaults}}
    os.environ.update(env)
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    _sync_hub_offline()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _sync_hub_offline()


def _sync_hub_offline() -> None:
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
        constants.HF_HUB_OFFLINE = flag.upper() in {"1", "ON", "YES", "TRUE"}


def handle_one(handler: Handler, request: Any, env: Mapping[str, str] = {},
               defaults: Mapping[str, str] = {}) -> tuple[dict[str, Any], int]:
    """Run one handler under its environment; every outcome becomes a result object and an exit code."""
    try:
        if not isinstance(request, dict):
            raise BadInput("the request must be a JSON object")
        with request_env(env, defaults):
            return ok_reply(handler(request)), 0
    except BadInput as exc:
        return error_reply(str(exc), "bad_input"), 2
    except Exception as exc:  # noqa: BLE001 - reported to the orchestrator as one line
        traceback.print_exc(file=sys.stderr)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return error_reply(f"{type(exc).__name__}: {first}", "failed"), 1


def _write(out: TextIO, result: dict[str, Any]) -> None:
    out.write(json.dumps(result) + "\n")
    out.flush()
    sys.stderr.flush()


def run(handler: Handler, env: Mapping[str, str] = {}, defaults: Mapping[str, str] = {}) -> None:
    """One-shot: one request on stdin, one result on stdout (under the command's environment)."""
    out = _private_stdout()
    try:
        request = json.load(sys.stdin)
    except ValueError as exc:
        result, code = error_reply(f"request is not JSON: {exc}", "bad_input"), 2
    else:
        result, code = handle_one(handler, request, env, defaults)
    _write(out, result)
    _exit(code)  # skip interpreter teardown: TF/absl atexit hooks are slow and noisy


def serve(resolve: Callable[[str], Any]) -> None:
    """Many requests, one per line, until stdin closes (`resolve`: command name -> Command)."""
    out = _private_stdout()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            command = resolve(msg["command"])
        except (ValueError, KeyError, TypeError, BadInput) as exc:
            _write(out, error_reply(f"bad message: {exc}", "bad_input"))
            continue
        reset_peak_rss()
        result, _code = handle_one(command.handle, msg.get("request"), command.env, command.defaults)
        result.setdefault("peak_rss_bytes", peak_rss())
        # Marks the end of this request's stderr, so the orchestrator credits every progress line
        # to the request that printed it.
        print(DONE_MARKER, file=sys.stderr, flush=True)
        _write(out, result)
    _exit(0)


def reset_peak_rss() -> None:
    """Start this process's peak-RSS mark afresh ("5" to clear_refs resets VmHWM, Linux >= 4.0):
    the server lives across requests, so its lifetime peak is not one request's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss() -> int | None:
    """The process's peak resident set (VmHWM) since the last reset: what one request needed (an
    export's peak is the basis on which the farm refuses a model too large for a machine)."""
    return proc_status_bytes("VmHWM")
