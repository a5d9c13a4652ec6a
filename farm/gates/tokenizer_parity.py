"""tokenizer_parity: Engine.tokenize of the bundle vs the tokenizers library with the source's
tokenizer.json as recorded at build time (182 multilingual strings: combining marks, NFD, CJK…)."""

from __future__ import annotations

from pydantic import Field

from farm.gates import GateParams, GateRequest, register


class Params(GateParams):
    # Strings to check instead of the shipped set (None: the 182 shipped strings).
    strings: list[str] | None = Field(None, min_length=1)
    require_round_trip: bool = False


@register("tokenizer_parity", kind="tokenizer", version=2, params=Params, sections=("HF_Tokenizer_Zlib",),
          description="Engine.tokenize vs the tokenizers library with the source tokenizer.json")
def request(ctx, p: Params) -> GateRequest | None:
    if ctx.tokenizer_sha is None:
        return None
    return GateRequest(inputs={"bundle_path": "bundle", "tokenizer_json": "tokenizer"},
                       args=p.model_dump(exclude_none=True))
