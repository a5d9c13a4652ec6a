"""task_accuracy: the shipped question set (68 everyday questions with checkable answers) asked of
the bundle and of the float PyTorch model; only the questions the float model answers right count,
and the gate fails when the bundle loses more of them than declared (`max_lost`: the gate config's,
else the recipe's allowance, else the farm's default for its bit width). Real models; enable with
`gates.task_accuracy: {}` (`completion: true` for a base model)."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, CardTable, GateRequest, against_reference, GateParams


# --- task_accuracy ------------------------------------------------------------------------------------
# A quality gate at task level: the shipped question set (68 everyday questions with checkable answers:
# capitals, sums, products, opposites, facts; farm_toolchain/data/task_questions.json) asked of the
# bundle and of the float model; only the questions the float model answers right count, and the
# bundle may lose at most `max_lost` of them. A smoke test of 8 questions passes files that have lost
# most of their ability (litert-torch #1068: int4 channelwise gave Qwen3-0.6B 0 % on GSM8K while an
# 8-question smoke test passed); a loss counted against the float model's own right answers does not.


class TaskAccuracy(GateParams):
    set: str = Field("everyday", min_length=1, description="a shipped question set")
    # Raw text the model continues (a base model), else the chat question through the chat template.
    completion: bool = False
    system_message: str | None = None
    max_tokens: int = Field(24, ge=1)
    # Answers of the float model's the file may lose: a number, else a fraction of the counted ones
    # (what a recipe's allowances give, farm/recipes/allowances.py), else 2.
    max_lost: int | None = Field(None, ge=0)
    max_lost_fraction: float | None = Field(None, ge=0, le=1)
    # Fewer questions than this answered right by the float model: too few to judge a file by (fail).
    min_counted: int = Field(10, ge=1)
    # Ask only the first this-many questions (None: all): for tests and quick looks, never for a claim.
    limit: int | None = Field(None, ge=1)


def card_row(result) -> list[str] | None:
    # Task accuracy beside the float model's own score (the seeds' GSM8K table).
    m = result.get("metrics") or {}
    if "float_right" not in m:
        return None
    return [f"{m['float_right']}/{m['questions']} ({100 * m['float_accuracy']:.0f} %)",
            f"{m['bundle_right']}/{m['questions']} ({100 * m['bundle_accuracy']:.0f} %)",
            f"{m['kept']} of {m['float_right']}", f"{m['lost']} (allowed {m['max_lost']})", f"{m['gained']}"]


CARD_TABLE = CardTable(
    lead=("The shipped everyday question set (farm_toolchain/data/task_questions.json) asked of each file "
          "(litert-lm, CPU, greedy) and of the float PyTorch model; only the questions the float model answers "
          "right count."),
    columns=("Float model", "This file", "Kept", "Lost", "Gained"), row=card_row)


@GATES.register("task_accuracy", kind="quality", version=1, params=TaskAccuracy, optional=True, per_class=True, order=35,
                sections=("TFLiteModel", "LlmMetadataProto", "HF_Tokenizer_Zlib"), card_section="quality",
                card_table=CARD_TABLE,
                description="68 everyday questions vs the float model: answers lost, counted on the ones it gets right")
def request(ctx, p: TaskAccuracy) -> GateRequest:
    return against_reference(ctx, p)
