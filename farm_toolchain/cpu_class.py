"""Where a gate's runtime runs: in this process (the host's own CPU class), or in a runtime host
presenting another class (farm_toolchain/runtime_host.py), which the gate drives through proxies.

A gate asks `runtime_module("litert_lm")` (farm_toolchain/gates/common.py) instead of importing the
runtime: inside `presenting(spec)` it gets a proxy of the module living in the runtime host, so every
Engine, Session and Conversation — and the ai_edge_litert Interpreter with its arrays — runs under
the class, while the PyTorch reference and every comparison stay in this process, on the host: the
reference never runs on the kernels it checks, and the arm64 root needs no torch.

Presentations (farm_common/presentation.py):
- `cpuid_mask`: this env's Python with the farm's shim preloaded (toolchain/cpuid_mask.c) and the
  class's CPUID bits cleared: native speed, x86 classes below the host's.
- `qemu`: qemu-aarch64 running the arm64 root's Python with the arm64 runtime wheels: arm64 classes
  by their CPU model (answers only; ~11-16x slower than native).

The host reports the class it saw (cpu_classes.read_view inside it); a host whose features differ
from the presentation's `expect` is refused (`NotPresented`): a class that was not presented must
never be recorded as presented. One host per presentation per toolchain process, started on first
use and kept for the gates that follow (an arm64 Python under qemu takes seconds to start).
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import contextvars
import importlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from farm_common import cpu_classes
from farm_common.presentation import Presentation
from farm_toolchain.protocol import BadInput

HOST_SCRIPT = Path(__file__).resolve().parent / "runtime_host.py"
RUNTIME: contextvars.ContextVar["RuntimeHost | None"] = contextvars.ContextVar("farm_runtime_host", default=None)
_HOSTS: dict[str, "RuntimeHost"] = {}
_NATIVE: list[cpu_classes.CpuView] = []


class NotPresented(BadInput):
    """The runtime host did not come up as the class it was asked to present."""


class RuntimeHostDied(RuntimeError):
    """The runtime host ended mid-request (a crash under the class is the case's result)."""


def native_view() -> cpu_classes.CpuView:
    if not _NATIVE:
        _NATIVE.append(cpu_classes.read_view("native"))
    return _NATIVE[0]


def runtime_module(name: str) -> Any:
    """The module `name` where the runtime runs now: this process's, or a proxy into the host."""
    host = RUNTIME.get()
    return host.module(name) if host is not None else importlib.import_module(name)


def current_view() -> cpu_classes.CpuView:
    host = RUNTIME.get()
    return host.view if host is not None else native_view()


def current_packages() -> dict[str, str] | None:
    """The runtime packages of the host (the arm64 root's wheels), None in this process."""
    host = RUNTIME.get()
    return host.packages if host is not None else None


@contextlib.contextmanager
def presenting(spec: dict[str, Any] | None) -> Iterator[cpu_classes.CpuView]:
    """Run the block's runtime under the class `spec` presents (None: this process's own)."""
    if spec is None:
        yield native_view()
        return
    try:
        p = Presentation.model_validate(spec)
    except ValueError as exc:
        raise BadInput(f"the request's cpu presentation is not valid: {exc}") from None
    host = _HOSTS.get(p.key())
    if host is None or not host.alive():
        host = _HOSTS[p.key()] = RuntimeHost(p)
    token = RUNTIME.set(host)
    try:
        yield host.view
    finally:
        RUNTIME.reset(token)


def close_all() -> None:
    for host in _HOSTS.values():
        host.close()
    _HOSTS.clear()


def launch(p: Presentation) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that start a runtime host presenting `p`."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CPUID_MASK_CLEAR", "PYTHONPATH")}
    env["PYTHONUNBUFFERED"] = "1"
    if p.how == "cpuid_mask":
        if not p.shim or not Path(p.shim).is_file() or not p.clear:
            raise BadInput(f"presenting {p.class_id} needs the CPUID shim ({p.shim}): reinstall the toolchain env "
                           "(`farm toolchain install`), which builds it with gcc")
        env.update(LD_PRELOAD=p.shim, CPUID_MASK_CLEAR=p.clear)
        return [sys.executable, str(HOST_SCRIPT), p.how], env
    if not (p.qemu and p.root and p.qemu_cpu and p.python and p.site):
        raise BadInput(f"presenting {p.class_id} under qemu needs qemu, root, qemu_cpu, python and site")
    if not Path(p.qemu).is_file():
        raise BadInput(f"{p.qemu} not found: install Debian's qemu-user-static to present {p.class_id}")
    env["PYTHONPATH"] = p.root.rstrip("/") + p.site
    env["PYTHONNOUSERSITE"] = "1"
    return [p.qemu, "-L", p.root, "-cpu", p.qemu_cpu, p.root.rstrip("/") + p.python, str(HOST_SCRIPT), p.how], env


class RuntimeHost:
    def __init__(self, p: Presentation):
        self.presentation = p
        argv, env = launch(p)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     cwd=str(HOST_SCRIPT.parent.parent))
        self._lock = threading.Lock()
        self._released: list[int] = []
        hello = self._read()
        if hello is None or "hello" not in hello:
            code = self.proc.wait()
            raise NotPresented(f"the runtime host for {p.class_id} did not start (exit {code}): see the log above "
                               "(86: the CPUID shim could not turn faulting on)")
        self.view = cpu_classes.CpuView.from_dict(hello["hello"]["cpu"])
        self.packages: dict[str, str] = hello["hello"].get("packages") or {}
        if tuple(self.view.features) != tuple(p.expect):
            self.close()
            raise NotPresented(f"{p.class_id} was not presented: the runtime host saw {self.view.label} "
                               f"({', '.join(self.view.features) or 'no features'}), expected "
                               f"{', '.join(p.expect)}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def request(self, op: str, **fields: Any) -> Any:
        with self._lock:
            if not self.alive():
                raise RuntimeHostDied(f"the runtime host for {self.presentation.class_id} is not running "
                                      f"(exit {self.proc.poll()})")
            msg = {"op": op, **fields}
            if self._released:
                msg["release"], self._released = self._released, []
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write((json.dumps(msg) + "\n").encode())
                self.proc.stdin.flush()
                reply = self._read()
            except (BrokenPipeError, ValueError):
                reply = None
            if reply is None:
                code = self.proc.wait()
                how = f"signal {-code}" if code < 0 else f"exit {code}"
                raise RuntimeHostDied(f"the runtime under {self.presentation.class_id} ended ({how}) during {op}")
        if reply.get("log"):
            os.write(2, reply["log"].encode())  # where the gate's native_errors() collects them
        if "error" in reply:
            err = reply["error"]
            raise _remote_error(err["type"])(err["message"])
        return self.decode(reply["value"])

    def module(self, name: str) -> Any:
        return self.request("import", name=name)

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if isinstance(value, dict):
            if "__h__" in value:
                return Remote(self, value["__h__"], value.get("type", "?"))
            if "__nd__" in value:
                import numpy as np

                dtype, shape, data = value["__nd__"]
                return np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype)).reshape(shape).copy()
            if "__dtype__" in value:
                import numpy as np

                return np.dtype(value["__dtype__"]).type
            return {k: self.decode(v) for k, v in value.items()}
        return value

    def release(self, handle: int) -> None:
        self._released.append(handle)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait()


def encode(value: Any) -> Any:
    if isinstance(value, Remote):
        return {"__h__": value._h}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, type) and issubclass(value, np.generic):
        return {"__dtype__": np.dtype(value).str}
    if np is not None and isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        return {"__nd__": [arr.dtype.str, list(arr.shape), base64.b64encode(arr.tobytes()).decode()]}
    if np is not None and isinstance(value, np.generic):
        return value.item()
    return value


class Remote:
    """An object living in the runtime host: attribute reads, calls and indexing are requests."""

    __slots__ = ("_host", "_h", "_type")

    def __init__(self, host: RuntimeHost, handle: int, type_name: str):
        object.__setattr__(self, "_host", host)
        object.__setattr__(self, "_h", handle)
        object.__setattr__(self, "_type", type_name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._host.request("getattr", obj=self._h, name=name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._host.request("call", obj=self._h, args=encode(list(args)), kwargs=encode(kwargs))

    def __getitem__(self, key: Any) -> Any:
        return self._host.request("getitem", obj=self._h, key=encode(key))

    def __len__(self) -> int:
        return self._host.request("len", obj=self._h)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __del__(self) -> None:
        try:
            self._host.release(self._h)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<{self._type} under {self._host.presentation.class_id}>"


_ERRORS: dict[str, type[Exception]] = {}


def _remote_error(name: str) -> type[Exception]:
    """An exception class named as the runtime host's was, so a gate's evidence reads the same under
    every class ('RuntimeError: litert_lm_conversation_send_message failed')."""
    if name == "BadInput":  # a request the runtime host could not use is the gate's bad input too
        return BadInput
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        return builtin
    if name not in _ERRORS:
        _ERRORS[name] = type(name, (RuntimeError,), {})
    return _ERRORS[name]
