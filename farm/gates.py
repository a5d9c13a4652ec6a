"""The correctness gates: which exist, what kind each is, which artifact its result describes.

Each gate is a toolchain command (farm_toolchain/gates/) that returns
{status: pass | fail | skipped, metrics, evidence, runtime, backend, findings}. Every gate here is one
the seed cards ran by hand and that caught, or would have caught, a defect they had to apologise for.
Kinds group gates for sibling re-checks: when a gate fails, the siblings re-run every gate of its kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from farm.errors import BadInput


@dataclass(frozen=True)
class Gate:
    name: str
    version: int
    kind: str
    command: str
    # "bundle": the result describes the .litertlm (its TFLite section for logits); "float": the
    # float export the bundle was made from (its own sha256 in lineage).
    target: str = "bundle"
    # Real-model-only gates run only when the config asks for them (e.g. a question set).
    optional: bool = False
    description: str = ""


GATES: tuple[Gate, ...] = (
    Gate("logits_parity_float", 1, "parity", "gate_logits", target="float",
         description="teacher-forced logits of the float export vs the PyTorch model"),
    Gate("logits_parity", 1, "parity", "gate_logits",
         description="teacher-forced logits of the bundle's TFLite section vs the PyTorch model"),
    Gate("generation_parity", 1, "parity", "gate_generation",
         description="greedy output of the bundle in litert-lm vs PyTorch greedy on the same prompts"),
    Gate("questions", 1, "quality", "gate_questions", optional=True,
         description="a question set with expected-answer regexes, plus the degeneration detector"),
    Gate("tokenizer_parity", 1, "tokenizer", "gate_tokenizer",
         description="Engine.tokenize vs the tokenizers library with the source tokenizer.json"),
    Gate("prompt_lengths", 1, "robustness", "gate_prompt_lengths",
         description="first token across every prefill boundary, a fresh Engine per length"),
    Gate("multi_turn", 1, "robustness", "gate_multi_turn",
         description="a three-turn conversation; each turn's render extends the previous one"),
    Gate("state_isolation", 1, "robustness", "gate_state_isolation",
         description="a second conversation on a used Engine vs on a fresh Engine"),
    Gate("metadata", 1, "metadata", "gate_metadata",
         description="stop tokens, executor metadata, tokenizer section == source tokenizer.json"),
)

BY_NAME = {g.name: g for g in GATES}


def select(names: list[str] | None, skip: list[str] = (), with_optional: bool = False) -> list[Gate]:
    """The gates to run: the named ones (any name unknown is bad input), or all that apply."""
    if names:
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            raise BadInput(f"unknown gate {unknown[0]!r}: gates are {', '.join(BY_NAME)}")
        return [BY_NAME[n] for n in names]
    return [g for g in GATES if g.name not in skip and (with_optional or not g.optional)]


def of_kind(kind: str) -> list[Gate]:
    return [g for g in GATES if g.kind == kind]
