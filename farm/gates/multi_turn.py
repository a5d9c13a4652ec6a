"""multi_turn: a conversation of several turns on one Engine; each turn's render extends the last."""

from __future__ import annotations

from pydantic import Field

from farm.gates import GateParams, GateRequest, register


class Params(GateParams):
    turns: list[str] = Field(default_factory=lambda: ["Hi!", "What is 2 + 3?", "Thanks!"], min_length=2)
    system: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)


@register("multi_turn", kind="robustness", version=2, params=Params,
          sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"),
          description="a multi-turn conversation; each turn's render extends the previous one")
def request(ctx, p: Params) -> GateRequest:
    return GateRequest(inputs={"bundle_path": "bundle", "model_dir": "reference"}, args=p.model_dump(exclude_none=True))
