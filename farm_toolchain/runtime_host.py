"""The runtime under a presented CPU class: a process that holds litert-lm (and ai_edge_litert)
objects for a gate running in the toolchain server, which drives them remotely
(farm_toolchain/cpu_class.py).

Run as a script, standard library only, so the same file serves the toolchain env's Python under a
CPUID mask and an arm64 Python under qemu-aarch64 (whose root carries only the runtime's wheels):

    python runtime_host.py HOW     (HOW: how the class was presented, recorded with what it saw)

Wire: one JSON object per line. The host first writes {"hello": {"cpu": CpuView, "pid"}}; then
for each request {"op": import | getattr | call | getitem | len, ..., "release": [handles the
driving side dropped]} one reply {"value": V} or
{"error": {"type", "message"}}, plus "log": what the runtime wrote to fd 2 while answering (its
native error lines: the driving side writes them to its own fd 2, where a gate collects them).
A value is JSON where it can be (str, numbers, lists, dicts of those), a numpy array as
{"__nd__": [dtype, shape, base64]}, anything else a handle {"__h__": id, "callable": bool}.
Handles in arguments come back as the objects they name.
"""

from __future__ import annotations

import base64
import enum
import importlib
import json
import os
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from farm_common import cpu_classes  # noqa: E402  (after the repo root is on the path)

_objects: dict[int, object] = {}
_next = [1]


def _handle(obj: object) -> dict:
    h = _next[0]
    _next[0] += 1
    _objects[h] = obj
    return {"__h__": h, "callable": callable(obj), "type": type(obj).__name__}


def encode(value: object, depth: int = 0) -> object:
    if isinstance(value, enum.Enum):  # an IntEnum is an int, but the runtime wants its member back
        return _handle(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(value, type) and issubclass(value, np.generic):
            return {"__dtype__": np.dtype(value).str}
        if isinstance(value, np.ndarray):
            arr = np.ascontiguousarray(value)
            return {"__nd__": [arr.dtype.str, list(arr.shape), base64.b64encode(arr.tobytes()).decode()]}
        if isinstance(value, np.generic):
            return value.item()
    if depth < 4 and isinstance(value, (list, tuple)):
        return [encode(v, depth + 1) for v in value]
    if depth < 4 and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: encode(v, depth + 1) for k, v in value.items()}
    return _handle(value)


def decode(value: object) -> object:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "__h__" in value:
            return _objects[value["__h__"]]
        if "__nd__" in value:
            import numpy as np

            dtype, shape, data = value["__nd__"]
            return np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype)).reshape(shape).copy()
        if "__dtype__" in value:
            import numpy as np

            return np.dtype(value["__dtype__"]).type
        return {k: decode(v) for k, v in value.items()}
    return value


def answer(req: dict) -> object:
    for h in req.get("release") or ():
        _objects.pop(h, None)
    op = req["op"]
    if op == "import":
        return importlib.import_module(req["name"])
    obj = _objects[req["obj"]]
    if op == "getattr":
        return getattr(obj, req["name"])
    if op == "call":
        return obj(*decode(req.get("args") or []), **decode(req.get("kwargs") or {}))
    if op == "getitem":
        return obj[decode(req["key"])]
    if op == "len":
        return len(obj)
    raise ValueError(f"unknown op {op!r}")


def _packages() -> dict:
    """The runtime packages this Python imports (the arm64 root has its own wheels)."""
    from importlib import metadata

    found = {}
    for name in ("litert-lm-api", "ai-edge-litert", "numpy"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: a killed toolchain server (a gate's time limit) takes this process with it."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))
    except (OSError, AttributeError):
        pass


def main() -> None:
    how = sys.argv[1] if len(sys.argv) > 1 else "native"
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the runtime's prints go to fd 2 with its logs, never into the wire
    sys.stdout = sys.stderr
    saved_err = os.dup(2)
    _die_with_parent()
    view = cpu_classes.read_view(how)
    out.write(json.dumps({"hello": {"cpu": view.to_dict(), "pid": os.getpid(), "packages": _packages()}}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        with tempfile.TemporaryFile() as log:
            sys.stderr.flush()
            os.dup2(log.fileno(), 2)
            try:
                reply: dict = {"value": encode(answer(req))}
            except AttributeError as exc:
                reply = {"error": {"type": "AttributeError", "message": str(exc)}}
            except Exception as exc:  # noqa: BLE001 - handed to the driving side, which raises it there
                reply = {"error": {"type": type(exc).__name__, "message": str(exc)}}
            finally:
                sys.stderr.flush()
                os.dup2(saved_err, 2)
            log.seek(0)
            reply["log"] = log.read().decode("utf-8", "replace")
        out.write(json.dumps(reply) + "\n")
        out.flush()
    os._exit(0)  # the runtime's atexit hooks are slow and noisy, as in the toolchain server


if __name__ == "__main__":
    main()
