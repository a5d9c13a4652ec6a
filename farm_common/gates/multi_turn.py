"""multi_turn: a conversation of several turns on one Engine; each turn's render extends the last."""

from __future__ import annotations

from pydantic import Field, field_validator

from farm_common.gates.registry import GATES, GateRequest, GateParams


class MultiTurn(GateParams):
    # Short, so that three turns fit the 64-token cache of the tiny test models.
    turns: list[str] = Field(default_factory=lambda: ["Hi!", "What is 2 + 3?", "Thanks!"], min_length=2)
    system: str | None = Field(None, min_length=1)
    # None: from the bundle's capacity (the measurement: capacity // 24, within [2, 32]).
    max_output_tokens: int | None = Field(None, ge=1)

    @field_validator("turns")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if any(not t for t in v):
            raise ValueError("turns must be non-empty user messages")
        return v


@GATES.register("multi_turn", kind="robustness", version=2, params=MultiTurn, per_class=True, order=80,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
                description="a multi-turn conversation; each turn's render extends the previous one")
def request(ctx, p: MultiTurn) -> GateRequest:
    return GateRequest(inputs={"bundle_path": "bundle", "model_dir": "reference"}, args=p.model_dump())
