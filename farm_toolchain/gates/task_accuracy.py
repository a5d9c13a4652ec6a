"""task_accuracy: accuracy at task level, the bundle against the float model.

Request:
    {"bundle_path", "model_dir" (the recorded reference), "reference_stop_ids",
     the settings of farm_common/gates/task_accuracy.py TaskAccuracy, with their defaults there: "set" (the
     shipped set, data/task_questions.json), "completion", "system_message", "max_tokens",
     "max_lost" (null: max_lost_fraction of the counted questions, rounded down; both null: 2),
     "min_counted", "limit"}

Per question (common.answer_case, the arithmetic gate's case): the bundle in a fresh Engine (its
own chat template through a Conversation, or a raw completion for a base model), greedy, and the
PyTorch float32 reference on the source tokenizer's render of the same message, stopping at the
source's own end-of-sequence ids; each reply scored by the question's answer regex and by the
degeneration detector.

Pass rules:
- counted: the questions the float model answers right (a question it gets wrong measures nothing
  about the conversion: faithful conversion includes the model's mistakes);
- lost: counted questions the bundle does not answer right (or answers with a degenerate reply);
  the gate fails when lost > max_lost;
- a bundle reply that degenerates, errs or runs past its end of turn where the reference ended
  cleanly fails the gate whatever max_lost says (never excused);
- fewer than min_counted counted questions: the float model knows too little for the set to judge
  a file by: fail, saying so.
The metrics give the float model's own score beside the bundle's (the card's Quality table).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from farm_common.gates.task_accuracy import TaskAccuracy
from farm_toolchain import protocol
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

QUESTIONS = Path(__file__).resolve().parents[1] / "data" / "task_questions.json"
DEFAULT_MAX_LOST = 2


def question_set(name: str) -> list[dict[str, str]]:
    sets = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    if name not in sets:
        raise BadInput(f"unknown question set {name!r}: the shipped sets are {', '.join(sorted(sets))}")
    return sets[name]


@MEASUREMENTS.register("task_accuracy")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    bundle = common.require_file(request, "bundle_path", "the .litertlm to ask")
    model_dir = common.model_folder(request)
    stop_ids = common.stop_ids_arg(request)
    p = common.settings(request, TaskAccuracy)
    questions = question_set(p.set)[: p.limit] if p.limit else question_set(p.set)
    if p.completion and p.system_message is not None:
        raise BadInput("system_message is for chat questions; completion prompts have no system turn")
    common.sections(bundle)

    t0 = time.monotonic()
    tokenizer, model = common.load_reference(model_dir, protocol.progress)
    if not p.completion and not getattr(tokenizer, "chat_template", None):
        raise BadInput(f"{model_dir} has no chat template: ask a base model with completion: true")
    end_texts = [t for t in (tokenizer.decode([i], skip_special_tokens=False) for i in stop_ids) if t.strip()]

    cases, evidence = [], []
    for n, q in enumerate(questions):
        prompt = q["completion"] if p.completion else q["chat"]
        protocol.progress(f"question {n + 1}/{len(questions)}: {prompt[:60]!r}")
        case = common.answer_case(bundle, tokenizer, model, prompt, re.compile(q["expect"], re.IGNORECASE),
                                  p.max_tokens, stop_ids, end_texts, completion=p.completion, system=p.system_message)
        cases.append({"id": q["id"], "expect": q["expect"], **case})
        pt_right, lt_right = case["pytorch"]["right"], case["litert"]["right"] and not case["litert"]["degeneration"]["degenerate"]
        verdict = ("LOOPS where the float model ends" if case["loops_where_reference_ends"] else
                   "LOST" if case["answer_lost"] else "kept" if pt_right else
                   "gained" if lt_right else "both wrong (not counted)")
        evidence.append(common.answer_evidence(q["id"], case, verdict))

    status, metrics, findings, extra = judge(cases, p)
    metrics["seconds"] = time.monotonic() - t0
    findings.insert(0, f"{len(cases)} questions ({p.set}, {'completion' if p.completion else 'chat'}) on litert-lm (CPU, "
                       f"greedy, a fresh Engine each) and on the float PyTorch model: " + findings.pop(0))
    return common.result(status, metrics, evidence, findings, cases=cases, **extra)


def judge(cases: list[dict[str, Any]], p: TaskAccuracy) -> tuple[str, dict[str, Any], list[str], dict[str, Any]]:
    """The pass rules of the module docstring over answered cases (common.answer_case, with "id"):
    (status, metrics, findings, {"lost_ids", "gained_ids"}). Pure: the unit tests' negative controls."""
    counted = [c for c in cases if c["pytorch"]["right"]]
    max_lost = (p.max_lost if p.max_lost is not None else
                int(p.max_lost_fraction * len(counted)) if p.max_lost_fraction is not None else DEFAULT_MAX_LOST)
    lost = [c["id"] for c in counted if c["answer_lost"]]
    gained = [c["id"] for c in cases if not c["pytorch"]["right"] and c["litert"]["right"]
              and not c["litert"]["degeneration"]["degenerate"]]
    loops = [c["id"] for c in cases if c["loops_where_reference_ends"]]
    bundle_right = sum(c["litert"]["right"] and not c["litert"]["degeneration"]["degenerate"] for c in cases)
    metrics = {
        "questions": len(cases),
        "float_right": len(counted),
        "float_accuracy": len(counted) / len(cases),
        "bundle_right": bundle_right,
        "bundle_accuracy": bundle_right / len(cases),
        "kept": len(counted) - len(lost),
        "lost": len(lost),
        "gained": len(gained),
        "max_lost": max_lost,
        "max_lost_fraction": p.max_lost_fraction,
        "loops_where_reference_ends": len(loops),
        "min_counted": p.min_counted,
        "max_tokens": p.max_tokens,
    }
    findings = [f"the float model answered {len(counted)} right, the bundle kept {len(counted) - len(lost)} of them (lost {len(lost)}, allowed {max_lost}) and "
                f"answered {bundle_right}/{len(cases)} in all."]
    failed = False
    if len(lost) > max_lost:
        failed = True
        findings.append(f"The bundle lost {len(lost)} answers the float model gives ({', '.join(lost)}), more than the "
                        f"{max_lost} allowed.")
    if loops:
        failed = True
        findings.append(f"Questions {', '.join(loops)}: the bundle's reply loops, errs or runs past its own end of turn "
                        "where the float model ends its reply (never excused).")
    if len(counted) < p.min_counted:
        failed = True
        findings.append(f"The float model answers only {len(counted)} of the {len(cases)} questions right, fewer than "
                        f"min_counted {p.min_counted}: too few for this set to judge a file by.")
    return ("fail" if failed else "pass"), metrics, findings, {"lost_ids": lost, "gained_ids": gained}
