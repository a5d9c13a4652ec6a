"""`gate`: run one gate's measurement, `{"gate": name, ...the gate's request}` (the measurements
register themselves: farm_toolchain/gates/registry.py). `python -m farm_toolchain gate <
request.json` runs one by hand.

`"cpu": {presentation}` (farm_common/presentation.py) runs the gate's runtime under another CPU
class (farm_toolchain/cpu_class.py); every answer carries `"cpu"`: the class the runtime process
saw (its dispatch features, label, host, and how it was presented)."""

from __future__ import annotations

from typing import Any

from farm_toolchain.commands import COMMANDS, OFFLINE
from farm_toolchain.cpu_class import presenting
from farm_toolchain.gates.registry import MEASUREMENTS


# Gates read local folders only: the bundle, the recorded reference, never the hub.
@COMMANDS.register("gate", env=OFFLINE)
def handle(request: dict[str, Any]) -> dict[str, Any]:
    measure = MEASUREMENTS.get(request.get("gate"))
    with presenting(request.get("cpu")) as view:
        out = measure({k: v for k, v in request.items() if k not in ("gate", "cpu")})
    replies = runtime_replies(out.get("cases"))
    return {**out, "cpu": view.to_dict(), **({"replies": replies} if replies else {})}


def runtime_replies(cases: Any) -> list[dict[str, Any]]:
    """What the runtime answered, case by case ({"case", "reply"}), from a gate's `cases` (questions,
    generation_parity, arithmetic, task_accuracy): recorded with the result, so replies can be set
    side by side across CPU classes (a card's pitfall quotes both)."""
    out = []
    for c in cases or []:
        if not isinstance(c, dict):
            continue
        lt = c.get("litert") if isinstance(c.get("litert"), dict) else {}
        reply = c.get("reply", lt.get("reply", lt.get("text")))
        key = c.get("prompt") or c.get("question") or c.get("id")
        if key is None or reply is None:
            continue
        error = c.get("error") or lt.get("error")
        out.append({"case": str(key), "reply": str(reply), **({"error": str(error)} if error else {})})
    return out
