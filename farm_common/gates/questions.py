"""questions: a question set with answer regexes, asked through the bundle's own chat template, each
reply also checked by the degeneration detector (real models; the questions must be ones the PyTorch
model answers right: faithful conversion includes the model's mistakes)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from farm_common.gates.registry import GATES, GateRequest, GateParams


# --- questions / arithmetic --------------------------------------------------------------------------


class Question(GateParams):
    prompt: str = Field(min_length=1)
    expect: str = Field(min_length=1, description="a regex the reply must match (case-insensitive)")

    @field_validator("expect")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"expect {v!r} is not a valid regex: {exc}") from None
        return v


class Questions(GateParams):
    # The build config's own questions, each checked against the PyTorch model first (faithful
    # conversion includes the model's mistakes).
    questions: list[Question] = Field(min_length=1)
    max_tokens: int = Field(64, ge=1)
    min_pass_fraction: float = Field(1.0, ge=0, le=1)
    system_message: str | None = None
    # Raw text the model continues, no chat template: a base model's completion-style question.
    completion: bool = False


@GATES.register("questions", kind="quality", version=2, params=Questions, optional=True, per_class=True, order=30,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="a question set with expected-answer regexes, plus the degeneration detector")
def request(ctx, p: Questions) -> GateRequest:
    if ctx.tokenizer_sha is None or ctx.reference_stop_ids is None:
        return GateRequest(inputs={"bundle_path": "bundle"}, args=p.model_dump())
    return GateRequest(inputs={"bundle_path": "bundle", "tokenizer_json": "tokenizer"},
                       args={**p.model_dump(), "reference_stop_ids": ctx.reference_stop_ids})
