"""arithmetic: multi-step arithmetic on the CPU backend, a fresh Engine per problem, scored for the
answer and for loops against the PyTorch reference (the seeds' defect: a recipe that made CPU
replies loop on multiplication while fp32 answered). Real models; enable with `gates.arithmetic: {}`."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateRequest, against_reference, GateParams
from farm_common.gates.questions import Question


class Arithmetic(GateParams):
    # None: the measurement's shipped "multiplication" set (farm_toolchain/gates/arithmetic.py).
    problems: list[Question] | None = Field(None, min_length=1)
    max_tokens: int = Field(160, ge=8)
    min_answer_agreement: float = Field(1.0, ge=0, le=1)


@GATES.register("arithmetic", kind="quality", version=1, params=Arithmetic, optional=True, per_class=True, order=40,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="multi-step arithmetic vs PyTorch: no loop where the reference ends, answers kept")
def request(ctx, p: Arithmetic) -> GateRequest:
    return against_reference(ctx, p)
