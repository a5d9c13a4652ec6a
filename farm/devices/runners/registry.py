"""The runner registry: how the farm reaches a device, one module per kind of runner.

A runner module defines its `runner:` config (a pydantic model with `kind: Literal["<kind>"]`, what
a device entry of infra/devices.yaml says about reaching it) and its Runner subclass, registered
together:

    @RUNNERS.register("ssh", config=SshRunnerConfig)
    class SshRunner(Runner): ...

The device registry builds a device's `runner:` union from the registered configs, and
`get_runner` picks the class by the device's kind: adding a runner is one new module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from farm.errors import BadInput
from farm_common.registry import Registry


@dataclass(frozen=True)
class RunnerKind:
    kind: str
    runner: type  # a farm.devices.runners.base.Runner subclass
    config: type[BaseModel]
    # The farm's own host: a device of this kind may leave out soc / ram_mb / os (read from this
    # host), and `local-cpu` is synthesized with it when the registry file does not list it.
    this_host: bool = False


def _make(kind: str, runner: type, attrs: dict[str, Any]) -> RunnerKind:
    config = attrs.pop("config")
    if config.model_fields["kind"].annotation.__args__ != (kind,):
        raise TypeError(f"runner {kind}: its config's kind must be Literal[{kind!r}]")
    runner.kind, runner.config = kind, config
    return RunnerKind(kind=kind, runner=runner, config=config, **attrs)


RUNNERS: Registry[RunnerKind] = Registry("runner", "farm.devices.runners", make=_make,
                                         support=("registry", "base"), error=BadInput)


def get_runner(device: Any, *, toolchain_python: Any = None) -> Any:
    """The runner for a registry device (farm.devices.registry.Device). `toolchain_python` locates
    the local `litert-lm` CLI (default: the farm's toolchain env, honouring FARM_TOOLCHAIN_PYTHON)."""
    return RUNNERS.get(device.runner.kind).runner(device, toolchain_python=toolchain_python)
