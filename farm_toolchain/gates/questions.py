"""questions: the seeds' sanity question set, asked the way a user asks (real models only).

Request:
    {"bundle_path": .litertlm,
     the settings of farm_common/gates/questions.py Questions, with their defaults there: "questions":
       [{"prompt": str, "expect": regex}] (required; by hand, also the name of a shipped set:
       "sanity", QUESTION_SETS), "max_tokens", "min_pass_fraction", "system_message",
       "completion" (true: each prompt is raw text the model continues, no chat template: a base
       model's completion-style question, e.g. "The capital of France is"),
     optional "max_num_tokens": the Engine's context (default: the runtime's),
     optional "reference_stop_ids" with "tokenizer_json": the source's end-of-sequence ids and its
       tokenizer.json (a reply that carries one of those tokens as text ran past its own end of turn)}
Per question, a fresh Engine and one Conversation (`create_conversation(sampler_config=greedy,
max_output_tokens=max_tokens)`, `send_message(prompt)`): the path `litert-lm run` takes, with the
bundle's own chat template. A question passes when `re.search(expect, reply, IGNORECASE)` matches
and the degeneration detector (degeneration.py) does not flag the reply, nor does the reply carry
an end-of-sequence token's text (the bundle produced it and did not stop) (token count from the
conversation's benchmark info, so "to the cap" is known). A runtime error is a failed question
with the error as evidence, not a failed request. Status "pass" iff at least min_pass_fraction of
the questions pass. The questions must be ones the PyTorch model answers right (checked when the
config is written): faithful conversion includes the model's mistakes.
"""

from __future__ import annotations

import time
from typing import Any

from farm_common.gates.questions import Questions
from farm_toolchain import protocol
from farm_toolchain.gates import common, degeneration
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

# Named question sets for real (trained) models: general knowledge and easy arithmetic, one short
# answer each.
QUESTION_SETS: dict[str, list[dict[str, str]]] = {
    "sanity": [
        {"prompt": "What is the capital of France? Answer in one word.", "expect": r"\bparis\b"},
        {"prompt": "What is 2 + 3?", "expect": r"\b5\b|\bfive\b"},
        {"prompt": "What is 17 + 25?", "expect": r"\b42\b"},
        {"prompt": "What is 17 times 23?", "expect": r"\b391\b"},
        {"prompt": "What is the chemical symbol for gold?", "expect": r"\bAu\b"},
        {"prompt": "Which planet is known as the Red Planet?", "expect": r"\bmars\b"},
        {"prompt": "How many days are in a week?", "expect": r"\b7\b|\bseven\b"},
        {"prompt": "What color is the sky on a clear day? Answer in one word.", "expect": r"\bblue\b"},
    ],
}


@MEASUREMENTS.register("questions")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    bundle = common.require_file(request, "bundle_path", "the .litertlm to ask")
    p = common.settings(common.with_named_set(request, "questions", QUESTION_SETS), Questions)
    questions = common.compiled(p.questions)
    max_tokens, min_pass, system_message, completion = p.max_tokens, p.min_pass_fraction, p.system_message, p.completion
    max_num_tokens = common.int_arg(request, "max_num_tokens", None)
    if completion and system_message is not None:
        raise BadInput("system_message is for chat questions; completion prompts have no system turn")
    end_texts = common.end_texts(request)
    common.sections(bundle)

    t0 = time.monotonic()
    cases, evidence, findings = [], [], []
    for n, q in enumerate(questions):
        protocol.progress(f"question {n + 1}/{len(questions)}: {q['prompt'][:60]!r}")
        t_q = time.monotonic()
        with common.fresh_engine(bundle, max_num_tokens, benchmark=True) as engine:
            got = (common.complete(engine, q["prompt"], max_tokens) if completion
                   else common.ask(engine, q["prompt"], max_tokens, system_message))
        reply, count, error = got["reply"], got["decode_tokens"], got["error"]
        deg = degeneration.detect(reply, None, max_tokens, hit_cap=None if count is None else count >= max_tokens)
        matched = error is None and bool(q["pattern"].search(reply))
        ran_past = any(t in reply for t in end_texts)
        ok = matched and not deg["degenerate"] and not ran_past
        cases.append({"prompt": q["prompt"], "expect": q["expect"], "reply": reply, "error": error,
                      "decode_tokens": count, "matched": matched, "degeneration": deg, "ran_past_end": ran_past,
                      "passed": ok,
                      "seconds": time.monotonic() - t_q})
        verdict = "pass" if ok else ("error" if error else "degenerate" if deg["degenerate"] else
                                     "ran past its end of turn" if ran_past else "no match")
        evidence.append(
            f"Q{n + 1} {q['prompt']!r} -> {error or reply!r} [{verdict}; expect /{q['expect']}/; "
            f"{count if count is not None else '?'} tokens]"
        )
        if deg["degenerate"]:
            findings.append(f"Q{n + 1} {q['prompt']!r}: degenerate reply ({deg['reason']}): {deg['detail']}")
        if error:
            findings.append(f"Q{n + 1} {q['prompt']!r}: the runtime failed: {error}")

    total = len(cases)
    passed = sum(c["passed"] for c in cases)
    metrics = {
        "questions": total,
        "passed": passed,
        "pass_fraction": passed / total,
        "min_pass_fraction": min_pass,
        "matched": sum(c["matched"] for c in cases),
        "degenerate": sum(c["degeneration"]["degenerate"] for c in cases),
        "ran_past_end": sum(c["ran_past_end"] for c in cases),
        "errors": sum(c["error"] is not None for c in cases),
        "max_tokens": max_tokens,
        "seconds": time.monotonic() - t0,
    }
    status = "pass" if metrics["pass_fraction"] >= min_pass else "fail"
    findings.insert(0, (
        f"{'Completion prompts' if completion else 'Sanity questions'} on litert-lm (CPU, greedy, one fresh Engine "
        f"per question): {passed}/{total} answered "
        f"as expected without degeneration."
    ))
    return common.result(status, metrics, evidence, findings, cases=cases)
