"""`cpu_view`: the CPU class a runtime process sees, here or under a presentation.

Request: {"cpu": presentation or absent}. Result: {"cpu": CpuView as a dict (arch, features, key,
label, host, how)}. The orchestrator asks once per class and process, before it looks for a recorded
result of that class: the class it reuses by is the one a runtime process reported, not the one a
registry entry promised."""

from __future__ import annotations

from typing import Any

from farm_toolchain.commands import COMMANDS
from farm_toolchain.cpu_class import presenting


@COMMANDS.register("cpu_view")
def handle(request: dict[str, Any]) -> dict[str, Any]:
    with presenting(request.get("cpu")) as view:
        return {"cpu": view.to_dict()}
