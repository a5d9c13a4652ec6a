"""The toolchain's commands, one registered unit per command module.

    @COMMANDS.register("export", env=OFFLINE)
    def handle(request: dict) -> dict: ...

`python -m farm_toolchain <command>` and the server (`serve`) find a command here by name;
`COMMANDS.load()` imports every module of the package (each imports only the standard library at
module level: torch and the litert packages are imported inside the handler, so listing the
commands, or running `versions`, costs no torch import).

`env`: what the command's request runs under, set by the request handling (protocol.py) for that
request only and put back afterwards, so one request's settings never leak into the next one in
the same server: `OFFLINE` for commands that read local folders only and must never reach the hub
(huggingface_hub and transformers would otherwise try it for a missing template); `defaults` are
set only where the caller's environment does not say otherwise (telemetry off, one tokenizer
thread, no progress bars)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from farm_common.registry import Registry
from farm_toolchain.protocol import BadInput

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
QUIET = {"HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1",
         "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # a bar redrawn per chunk is log noise, not progress


@dataclass(frozen=True)
class Command:
    name: str
    handle: Callable[[dict[str, Any]], dict[str, Any]]
    env: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=lambda: dict(QUIET))


def _make(name: str, handle: Callable[[dict[str, Any]], dict[str, Any]], attrs: dict[str, Any]) -> Command:
    return Command(name=name, handle=_checked(name, handle), **attrs)


def _checked(name: str, handle: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The handler between the two checks of its contract (farm_common/commands.py): a request that
    breaks it is bad input before the handler runs; a result that breaks it fails the request (the
    handler's fault), instead of reaching the orchestrator as a KeyError."""
    def run(request: dict[str, Any]) -> dict[str, Any]:
        from farm_common import commands  # pydantic: imported when a command runs, not when listed

        commands.check_request(name, request)
        result = handle(request)
        commands.check_result(name, result)
        return result

    run.__doc__, run.__wrapped__ = handle.__doc__, handle  # type: ignore[attr-defined]
    return run


COMMANDS: Registry[Command] = Registry(
    "toolchain command", "farm_toolchain", make=_make, error=BadInput, plural="commands",
    support=("commands", "compat", "cpu_class", "grid", "model_folder", "protocol", "runtime_host", "threads", "tflite",
             "tflite_run", "weights_once", "vision_export"))
