"""task_accuracy: the shipped question set (68 everyday questions with checkable answers) asked of
the bundle and of the float PyTorch model; only the questions the float model answers right count,
and the gate fails when the bundle loses more of them than declared (`max_lost`: the gate config's,
else the recipe's allowance, else the farm's default for its bit width). Real models; enable with
`gates.task_accuracy: {}` (`completion: true` for a base model)."""

from __future__ import annotations

from farm.gates.registry import GATES, GateRequest, against_reference
from farm_common.gate_params import TaskAccuracy


@GATES.register("task_accuracy", kind="quality", version=1, params=TaskAccuracy, optional=True, per_class=True, order=35,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="68 everyday questions vs the float model: answers lost, counted on the ones it gets right")
def request(ctx, p: TaskAccuracy) -> GateRequest:
    return against_reference(ctx, p)
