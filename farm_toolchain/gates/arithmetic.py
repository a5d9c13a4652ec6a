"""arithmetic: multi-step arithmetic on the CPU backend, scored for the answer and for loops, against
the PyTorch reference (real models only).

The seeds' defect was exactly this: a quantization recipe made CPU replies loop on multi-step
arithmetic ("= 17 × 23 = 17 × 23 …" to the token cap) while GPU and fp32 answered. A question set
alone cannot tell a model that cannot multiply from a file that broke its arithmetic, so every
problem is asked of both:
- the bundle: a fresh Engine per problem and one Conversation (`send_message`, the bundle's own chat
  template and stop tokens: the path `litert-lm run` takes), greedy;
- the PyTorch float32 reference: the source tokenizer's `apply_chat_template` render of the same user
  message, greedy `generate` stopping at the source's own end-of-sequence ids.

Request:
    {"bundle_path", "model_dir" (the recorded reference), "reference_stop_ids",
     the settings of farm_common/gates/arithmetic.py Arithmetic, with their defaults there: "problems":
       [{"prompt", "expect": regex}] (null: the shipped "multiplication" set, PROBLEM_SETS; by hand,
       also a set's name), "max_tokens", "min_answer_agreement"}

Pass rules:
- loops: no problem where the bundle's reply is degenerate (degeneration.py: a repeated line or
  n-gram to the cap, or an empty reply) or runs past its own end (the reply carries the source's
  end-of-sequence token as text: the bundle did not stop where the model ended its turn), while the
  reference ended its reply within the cap without degenerating. This holds on any model, one that
  cannot multiply included. A reply that merely runs to the cap without looping is reported, not
  failed: measured on int8 SmolLM2-135M, 3 of 8 replies took another, longer path to the 160-token
  cap (different wording after an int8-flipped token) without repeating itself.
- answers: of the problems the reference answers right (regex, no degeneration), the bundle answers
  at least min_answer_agreement right. When the reference answers none, answers are not gated (the
  finding says so) and the loop rule still is.
"""

from __future__ import annotations

import time
from typing import Any

from farm_common.gates.arithmetic import Arithmetic
from farm_common.gates.questions import Question
from farm_toolchain import protocol
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

# Multi-step products (the seed cards' CPU probes) and two-step sums and products a small model may
# get right, so the answer rule has something to compare on more than the largest models.
PROBLEM_SETS: dict[str, list[dict[str, str]]] = {
    "multiplication": [
        {"prompt": "What is 17 × 23?", "expect": r"\b391\b"},
        {"prompt": "What is 23 × 17?", "expect": r"\b391\b"},
        {"prompt": "What is 12 × 34?", "expect": r"\b408\b"},
        {"prompt": "What is 9 × 87?", "expect": r"\b783\b"},
        {"prompt": "What is 45 × 12?", "expect": r"\b540\b"},
        {"prompt": "What is 36 × 25?", "expect": r"\b900\b"},
        {"prompt": "What is 3 times 4?", "expect": r"\b12\b|\btwelve\b"},
        {"prompt": "What is 10 + 15?", "expect": r"\b25\b"},
    ],
}


@MEASUREMENTS.register("arithmetic")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    bundle = common.require_file(request, "bundle_path", "the .litertlm to ask")
    model_dir = common.model_folder(request)
    stop_ids = common.stop_ids_arg(request)
    settings = common.settings(common.with_named_set(request, "problems", PROBLEM_SETS), Arithmetic)
    # No problems given: the shipped multiplication set.
    shipped = [Question(**q) for q in PROBLEM_SETS["multiplication"]]
    problems = common.compiled(settings.problems or shipped)
    max_tokens, min_agree = settings.max_tokens, settings.min_answer_agreement
    common.sections(bundle)

    t0 = time.monotonic()
    tokenizer, model = common.load_reference(model_dir, protocol.progress)
    if not getattr(tokenizer, "chat_template", None):
        raise BadInput(f"{model_dir} has no chat template: arithmetic asks chat questions")
    end_texts = [t for t in (tokenizer.decode([i], skip_special_tokens=False) for i in stop_ids) if t.strip()]

    cases, evidence, findings = [], [], []
    for n, p in enumerate(problems):
        protocol.progress(f"problem {n + 1}/{len(problems)}: {p['prompt']!r}")
        case = common.answer_case(bundle, tokenizer, model, p["prompt"], p["pattern"], max_tokens, stop_ids, end_texts)
        cases.append({"prompt": case["prompt"], "expect": p["expect"], **{k: v for k, v in case.items() if k != "prompt"}})
        verdict = ("LOOPS" if case["loops_where_reference_ends"] else
                   "WRONG where PyTorch is right" if case["answer_lost"] else "ok")
        evidence.append(common.answer_evidence(f"P{n + 1}", case, verdict))

    total = len(cases)
    ref_right_n = sum(c["pytorch"]["right"] for c in cases)
    kept = sum(c["pytorch"]["right"] and not c["answer_lost"] for c in cases)
    loops = [i + 1 for i, c in enumerate(cases) if c["loops_where_reference_ends"]]
    lost = [i + 1 for i, c in enumerate(cases) if c["answer_lost"]]
    agreement = kept / ref_right_n if ref_right_n else None
    metrics = {
        "problems": total,
        "reference_right": ref_right_n,
        "bundle_right": sum(c["litert"]["right"] and not c["litert"]["degeneration"]["degenerate"] for c in cases),
        "answers_kept": kept,
        "answer_agreement": agreement,
        "min_answer_agreement": min_agree,
        "loops_where_reference_ends": len(loops),
        "bundle_degenerate": sum(c["litert"]["degeneration"]["degenerate"] for c in cases),
        "bundle_ran_past_end": sum(c["litert"]["ran_past_end"] for c in cases),
        "bundle_ran_to_cap": sum(bool(c["litert"]["ran_to_cap"]) for c in cases),
        "reference_degenerate": sum(c["pytorch"]["degeneration"]["degenerate"] for c in cases),
        "answers_gated": ref_right_n > 0,
        "max_tokens": max_tokens,
        "seconds": time.monotonic() - t0,
    }
    ok = not loops and (agreement is None or agreement >= min_agree)
    head = (f"Arithmetic on litert-lm (CPU, greedy, a fresh Engine per problem) against PyTorch float32: the "
            f"bundle answered {metrics['bundle_right']}/{total} right, the reference {ref_right_n}/{total}")
    if loops:
        findings.append(f"Problems {loops}: the bundle's reply loops, or runs past its own end of turn, where the "
                        "PyTorch reference ends its reply (the seeds' CPU arithmetic defect).")
    if lost:
        findings.append(f"Problems {lost}: the bundle answers wrong where the PyTorch reference answers right.")
    if not ref_right_n:
        findings.append("The reference answered no problem right, so answers were not gated; loops were.")
    findings.insert(0, head + ("." if ok else "; it fails."))
    return common.result("pass" if ok else "fail", metrics, evidence, findings, cases=cases)
