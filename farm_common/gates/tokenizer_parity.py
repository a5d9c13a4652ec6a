"""tokenizer_parity: Engine.tokenize of the bundle vs the tokenizers library with the source's
tokenizer.json as recorded at build time (182 multilingual strings: combining marks, NFD, CJK…)."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateRequest, GateParams


class TokenizerString(GateParams):
    text: str
    id: str | None = None
    script: str | None = None


class TokenizerParity(GateParams):
    # Strings to check instead of the shipped set (None: the 182 shipped strings); a string, or one
    # with its id and script for the evidence.
    strings: list[str | TokenizerString] | None = Field(None, min_length=1)
    require_round_trip: bool = False


@GATES.register("tokenizer_parity", kind="tokenizer", version=2, params=TokenizerParity, order=50,
                sections=("HF_Tokenizer_Zlib",),
                description="Engine.tokenize vs the tokenizers library with the source tokenizer.json")
def request(ctx, p: TokenizerParity) -> GateRequest | None:
    if ctx.tokenizer_sha is None:
        return None
    return GateRequest(inputs={"bundle_path": "bundle", "tokenizer_json": "tokenizer"}, args=p.model_dump())
