"""`gate_generation` and `gate_questions`: what the bundle says, through litert-lm, on the CPU backend.

gate_generation (handle_generation) — greedy parity with PyTorch on the same token ids.
Request:
    {"bundle_path": .litertlm, "model_dir": the HF folder it was converted from,
     "prompts": [str], optional "max_tokens": 16, optional "apply_chat_template": true,
     optional "min_match_fraction": 1.0, optional "tie_margin": 0.01, optional "min_prefix_tokens": 0}
Per prompt:
- The prompt is rendered once, by the source folder's tokenizer (`apply_chat_template(
  [{"role": "user", "content": prompt}], add_generation_prompt=True)`, or the raw prompt when
  apply_chat_template is false), and that same text goes to both sides.
- litert-lm: a fresh Engine (an Engine carries state from one session to the next; see the seeds'
  one-Engine-per-conversation finding), `create_session(apply_prompt_template=False,
  sampler_config=SamplerConfig(top_k=1, temperature=0.0), max_output_tokens=max_tokens)`,
  `run_prefill([text])`, `run_decode().texts[0]`; the decoded token count from the session's
  benchmark info. The runtime does not hand out the generated ids, only text.
- PyTorch: float32 `generate(do_sample=False, max_new_tokens=max_tokens)` on the ids the runtime
  feeds: `Engine.tokenize(text)`, with the bundle's start token in front when it has one (the session
  adds it at prefill; tokenize does not). When these ids differ from the source tokenizer's, that is
  reported (prompt_id_mismatches) and PyTorch still gets the runtime's ids, so the comparison stays
  on identical input. Generation stops at the bundle's stop tokens (single ids as eos_token_id,
  multi-token stop sequences cut afterwards); the stop itself is not part of the reply.
  PyTorch's text is `decode(ids, skip_special_tokens=False)`: Engine text keeps special tokens.
- matched: the two texts are identical. prefix_tokens: the largest k such that PyTorch's first k
  generated tokens decode to a prefix of the runtime's text.
Faithful conversion includes the model's mistakes: the reference is the PyTorch model, so a looping
or wrong PyTorch reply that the bundle reproduces is a pass; the degeneration detector's verdict on
both sides is reported, not gated. near_tie: the outputs part ways at a token where PyTorch's own
top-1/top-2 logit margin is below tie_margin (a coin flip for any faithful int8 model).
prefix_agrees: with min_prefix_tokens > 0, the first that many tokens agree (int8 rounding moves later
tokens of a faithful file). Status: pass when (matched + near_ties + prefix agreements) / prompts >=
min_match_fraction; exact matches are always reported on their own.

gate_questions (handle_questions) — the seeds' sanity question set, for real models.
Request:
    {"bundle_path": .litertlm, "questions": [{"prompt": str, "expect": regex}] or a set name
       ("sanity", the default, or "arithmetic": QUESTION_SETS),
     optional "max_tokens": 64, optional "min_pass_fraction": 1.0, optional "system_message": str,
     optional "max_num_tokens": the Engine's context (default: the runtime's)}
Per question, a fresh Engine and one Conversation (`create_conversation(sampler_config=greedy,
max_output_tokens=max_tokens)`, `send_message(prompt)`): the path `litert-lm run` takes, with the
bundle's own chat template. A question passes when `re.search(expect, reply, IGNORECASE)` matches
and the degeneration detector (degeneration.py) does not flag the reply (token count from the
conversation's benchmark info, so "to the cap" is known). A runtime error is a failed question
with the error as evidence, not a failed request.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from farm_toolchain import gates, protocol  # noqa: E402
from farm_toolchain.gates import degeneration  # noqa: E402
from farm_toolchain.protocol import BadInput  # noqa: E402


def _str_list(request: dict[str, Any], key: str) -> list[str]:
    value = request.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise BadInput(f"{key} must be a non-empty list of non-empty strings")
    return value


def _greedy():
    import litert_lm

    return litert_lm.SamplerConfig(top_k=1, temperature=0.0)


def _engine(path: Path, max_num_tokens: int | None):
    import litert_lm

    return litert_lm.Engine(
        str(path), backend=litert_lm.Backend.CPU(), max_num_tokens=max_num_tokens, enable_benchmark=True
    )


def _decode_count(obj: Any) -> int | None:
    try:
        return int(obj.get_benchmark_info().last_decode_token_count)
    except Exception:  # noqa: BLE001 - benchmark info is a convenience, not the measurement
        return None


def _cut_at_stop(ids: list[int], stops: list[list[int]]) -> tuple[list[int], list[int] | None]:
    """ids up to (not including) the earliest stop sequence, and that stop sequence."""
    best, which = len(ids), None
    for stop in stops:
        n = len(stop)
        for i in range(0, len(ids) - n + 1):
            if i >= best:
                break
            if ids[i : i + n] == stop:
                best, which = i, stop
                break
    return ids[:best], which


def _matching_prefix(tokenizer: Any, ids: list[int], text: str) -> int:
    best = 0
    for k in range(1, len(ids) + 1):
        if text.startswith(tokenizer.decode(ids[:k], skip_special_tokens=False)):
            best = k
    return best


def _degeneration_summary(verdict: dict[str, Any]) -> str:
    return verdict["reason"] if verdict["degenerate"] else "clean"


# --- gate_generation -------------------------------------------------------------------------------


def handle_generation(request: dict[str, Any]) -> dict[str, Any]:
    bundle = gates.existing_file(request, "bundle_path", "the .litertlm to run")
    model_dir = gates.model_folder(request)
    prompts = _str_list(request, "prompts")
    max_tokens = gates.int_arg(request, "max_tokens", 16)
    use_template = gates.bool_arg(request, "apply_chat_template", True)
    min_match = gates.fraction_arg(request, "min_match_fraction", 1.0)
    # A prompt whose outputs part ways where PyTorch itself was nearly undecided (its top-1/top-2
    # logit margin below this) counts as a near-tie, not a mismatch: int8 rounding may flip such a
    # token on a flat-logit model (measured on the tiny Qwen3.5: margin 0.00068 at the split).
    tie_margin = float(request.get("tie_margin", 0.01))
    # For quantized bundles: a prompt also agrees when its first min_prefix_tokens tokens match
    # PyTorch's (0: exact match only). Measured on SmolLM2-135M int8: "The capital of France is
    # Paris." vs "… Paris, France." part ways at token 6 with a clear 0.30 logit margin: int8 rounding
    # moves later tokens of a faithful file, while a broken one (the fused-GDN head bug, another
    # seed's weights) parts ways within the first token or two.
    min_prefix = gates.int_arg(request, "min_prefix_tokens", 0, minimum=0)
    gates.tflite_sections(bundle)  # a readable bundle, or BadInput

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.monotonic()
    protocol.progress(f"loading the PyTorch reference from {model_dir} (float32)")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    if use_template and not getattr(tokenizer, "chat_template", None):
        raise BadInput(f"apply_chat_template is true but {model_dir} has no chat template")

    cases, evidence, findings = [], [], []
    with tempfile.TemporaryDirectory(prefix="gate_generation-") as tmp:
        path = gates.copy_to_scratch(bundle, Path(tmp))
        for n, prompt in enumerate(prompts):
            if use_template:
                text = tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
                )
            else:
                text = prompt
            hf_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            protocol.progress(f"prompt {n + 1}/{len(prompts)}: litert-lm")
            engine = _engine(path, len(hf_ids) + max_tokens + 16)
            try:
                rt_ids = engine.tokenize(text)
                bos = engine.bos_token_id
                stops = [s for s in engine.eos_token_ids if s]
                input_ids = ([bos] if bos is not None else []) + rt_ids
                session = engine.create_session(
                    apply_prompt_template=False, sampler_config=_greedy(), max_output_tokens=max_tokens
                )
                try:
                    t_lt = time.monotonic()
                    session.run_prefill([text])
                    lt_text = session.run_decode().texts[0]
                    lt_seconds = time.monotonic() - t_lt
                    lt_count = _decode_count(session)
                finally:
                    session.close()
            finally:
                engine.close()

            protocol.progress(f"prompt {n + 1}/{len(prompts)}: PyTorch")
            single = sorted({s[0] for s in stops if len(s) == 1})
            pad_id = getattr(model.config, "pad_token_id", None)
            if pad_id is None:
                pad_id = single[0] if single else 0
            with torch.no_grad():
                out = model.generate(
                    torch.tensor([input_ids], dtype=torch.long),
                    attention_mask=torch.ones(1, len(input_ids), dtype=torch.long),
                    max_new_tokens=max_tokens,
                    do_sample=False,
                    eos_token_id=single or None,
                    pad_token_id=pad_id,
                    output_logits=True,
                    return_dict_in_generate=True,
                )
            gen = out.sequences[0, len(input_ids) :].tolist()
            gen, stop = _cut_at_stop(gen, stops)
            pt_text = tokenizer.decode(gen, skip_special_tokens=False)
            matched = pt_text == lt_text
            prefix = len(gen) if matched else _matching_prefix(tokenizer, gen, lt_text)
            divergence = None
            if not matched and prefix < len(out.logits):
                # How close PyTorch itself was to another token where the two first part ways: a
                # near-tie (flat logits, int8 noise) reads differently from a confident token lost.
                top2 = torch.topk(out.logits[prefix][0].float(), 2).values.tolist()
                divergence = {"token_index": prefix, "pytorch_top2_margin": top2[0] - top2[1]}
            pt_hit_cap = stop is None and len(gen) >= max_tokens
            pt_deg = degeneration.detect(pt_text, gen, max_tokens, hit_cap=pt_hit_cap)
            lt_deg = degeneration.detect(
                lt_text, None, max_tokens, hit_cap=None if lt_count is None else lt_count >= max_tokens
            )
            cases.append(
                {
                    "prompt": prompt,
                    "rendered": text,
                    "prompt_ids": input_ids,
                    "prompt_ids_match_source_tokenizer": rt_ids == hf_ids,
                    "pytorch": {"text": pt_text, "ids": gen, "stop": stop, "degeneration": pt_deg},
                    "litert": {"text": lt_text, "decode_tokens": lt_count, "seconds": lt_seconds, "degeneration": lt_deg},
                    "matched": matched,
                    "near_tie": bool(divergence and divergence["pytorch_top2_margin"] < tie_margin),
                    "prefix_agrees": bool(not matched and min_prefix and prefix >= min(min_prefix, len(gen))),
                    "prefix_tokens": prefix,
                    "divergence": divergence,
                }
            )
            evidence.append(
                f"prompt {n + 1} {prompt!r} ({len(input_ids)} ids): pytorch {pt_text!r} | litert-lm {lt_text!r} | "
                f"{'identical' if matched else f'first {prefix} of {len(gen)} tokens agree'}"
                + (
                    f" (pytorch's top-1/top-2 logit margin at token {prefix}: {divergence['pytorch_top2_margin']:.4g})"
                    if divergence
                    else ""
                )
            )
            evidence.append(f"prompt {n + 1} pytorch ids: {gen}")
            if rt_ids != hf_ids:
                findings.append(
                    f"Prompt {n + 1}: the bundle's tokenizer gives {len(rt_ids)} ids, the source tokenizer {len(hf_ids)} "
                    "for the same rendered text; PyTorch was given the bundle's ids."
                )

    total = len(cases)
    matched_n = sum(c["matched"] for c in cases)
    ties = sum(c["near_tie"] for c in cases)
    by_prefix = sum(c["prefix_agrees"] and not c["near_tie"] for c in cases)
    metrics = {
        "prompts": total,
        "matched": matched_n,
        "near_ties": ties,
        "prefix_agreements": by_prefix,
        "min_prefix_tokens": min_prefix,
        "match_fraction": (matched_n + ties + by_prefix) / total,
        "mean_prefix_tokens": sum(c["prefix_tokens"] for c in cases) / total,
        "mean_pytorch_tokens": sum(len(c["pytorch"]["ids"]) for c in cases) / total,
        "prompt_id_mismatches": sum(not c["prompt_ids_match_source_tokenizer"] for c in cases),
        "degenerate_pytorch": sum(c["pytorch"]["degeneration"]["degenerate"] for c in cases),
        "degenerate_litert": sum(c["litert"]["degeneration"]["degenerate"] for c in cases),
        "min_divergence_margin": min(
            (c["divergence"]["pytorch_top2_margin"] for c in cases if c["divergence"]), default=None
        ),
        "max_tokens": max_tokens,
        "seconds": time.monotonic() - t0,
    }
    status = "pass" if metrics["match_fraction"] >= min_match else "fail"
    if status == "fail":
        findings.insert(
            0,
            f"Greedy output differs from PyTorch on {total - matched_n - ties - by_prefix} of {total} prompts "
            f"(required match fraction {min_match:g}; near-ties below a {tie_margin:g} logit margin excused: {ties}).",
        )
    else:
        findings.insert(
            0,
            f"Greedy litert-lm output (CPU) equals PyTorch float32 greedy output on {matched_n} of {total} prompts "
            f"({max_tokens}-token cap)" + (f"; {ties} more part ways only at a near-tie of PyTorch's own "
            f"(top-1/top-2 margin below {tie_margin:g})." if ties else ".")
            + (f" On {by_prefix} more the first {min_prefix} tokens agree and later ones differ." if by_prefix else ""),
        )
    both = [i + 1 for i, c in enumerate(cases) if c["pytorch"]["degeneration"]["degenerate"] and c["litert"]["degeneration"]["degenerate"]]
    if both:
        findings.append(
            f"Prompts {both}: PyTorch and litert-lm both degenerate (the model's own behaviour, reproduced faithfully)."
        )
    only_lt = [i + 1 for i, c in enumerate(cases) if c["litert"]["degeneration"]["degenerate"] and not c["pytorch"]["degeneration"]["degenerate"]]
    if only_lt:
        findings.append(f"Prompts {only_lt}: litert-lm degenerates where PyTorch does not.")
    return gates.result(
        status,
        metrics,
        evidence,
        findings,
        cases=cases,
        apply_chat_template=use_template,
        min_match_fraction=min_match,
        tie_margin=tie_margin,
    )


# --- gate_questions --------------------------------------------------------------------------------


# Named question sets for real (trained) models. "sanity": general knowledge and easy arithmetic, one
# short answer each; "arithmetic": the seed cards' six CPU multiplication probes, where a defective
# int8 recipe repeated a line to the token cap (run with a larger max_tokens, e.g. 400).
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
    "arithmetic": [
        {"prompt": "What is 17 × 23?", "expect": r"\b391\b"},
        {"prompt": "What is 23 × 17?", "expect": r"\b391\b"},
        {"prompt": "What is 12 × 34?", "expect": r"\b408\b"},
        {"prompt": "What is 9 × 87?", "expect": r"\b783\b"},
        {"prompt": "What is 45 × 12?", "expect": r"\b540\b"},
        {"prompt": "What is 36 × 25?", "expect": r"\b900\b"},
    ],
}


def _questions(request: dict[str, Any]) -> list[dict[str, Any]]:
    raw = request.get("questions", "sanity")
    if isinstance(raw, str):
        if raw not in QUESTION_SETS:
            raise BadInput(f"questions {raw!r} is not a known set: use one of {sorted(QUESTION_SETS)} or a list")
        raw = QUESTION_SETS[raw]
    if not isinstance(raw, list) or not raw:
        raise BadInput("questions must be a non-empty list of {\"prompt\": str, \"expect\": regex} or a set name")
    out = []
    for i, q in enumerate(raw):
        if not isinstance(q, dict) or not isinstance(q.get("prompt"), str) or not q["prompt"]:
            raise BadInput(f"questions[{i}] needs a non-empty \"prompt\" string")
        if not isinstance(q.get("expect"), str) or not q["expect"]:
            raise BadInput(f"questions[{i}] needs an \"expect\" regex string")
        try:
            pattern = re.compile(q["expect"], re.IGNORECASE)
        except re.error as exc:
            raise BadInput(f"questions[{i}].expect is not a valid regex: {exc}") from exc
        out.append({"prompt": q["prompt"], "expect": q["expect"], "pattern": pattern})
    return out


def _message_text(message: Any) -> str:
    data = message.to_json() if hasattr(message, "to_json") else message
    content = data.get("content", "") if isinstance(data, dict) else data
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def handle_questions(request: dict[str, Any]) -> dict[str, Any]:
    bundle = gates.existing_file(request, "bundle_path", "the .litertlm to ask")
    questions = _questions(request)
    max_tokens = gates.int_arg(request, "max_tokens", 64)
    min_pass = gates.fraction_arg(request, "min_pass_fraction", 1.0)
    system_message = request.get("system_message")
    if system_message is not None and not isinstance(system_message, str):
        raise BadInput("system_message must be a string")
    gates.tflite_sections(bundle)
    max_num_tokens = request.get("max_num_tokens")
    if max_num_tokens is not None:
        max_num_tokens = gates.int_arg(request, "max_num_tokens", 0)

    t0 = time.monotonic()
    cases, evidence, findings = [], [], []
    with tempfile.TemporaryDirectory(prefix="gate_questions-") as tmp:
        path = gates.copy_to_scratch(bundle, Path(tmp))
        for n, q in enumerate(questions):
            protocol.progress(f"question {n + 1}/{len(questions)}: {q['prompt'][:60]!r}")
            reply, error, count = "", None, None
            t_q = time.monotonic()
            try:
                engine = _engine(path, max_num_tokens)
                try:
                    conv = engine.create_conversation(
                        sampler_config=_greedy(), max_output_tokens=max_tokens, system_message=system_message
                    )
                    try:
                        reply = _message_text(conv.send_message(q["prompt"]))
                        count = _decode_count(conv)
                    finally:
                        conv.close()
                finally:
                    engine.close()
            except Exception as exc:  # noqa: BLE001 - a runtime failure is this question's result
                error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            seconds = time.monotonic() - t_q
            deg = degeneration.detect(reply, None, max_tokens, hit_cap=None if count is None else count >= max_tokens)
            matched = error is None and bool(q["pattern"].search(reply))
            ok = matched and not deg["degenerate"]
            cases.append(
                {
                    "prompt": q["prompt"],
                    "expect": q["expect"],
                    "reply": reply,
                    "error": error,
                    "decode_tokens": count,
                    "matched": matched,
                    "degeneration": deg,
                    "passed": ok,
                    "seconds": seconds,
                }
            )
            verdict = "pass" if ok else ("error" if error else ("degenerate" if deg["degenerate"] else "no match"))
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
        "matched": sum(c["matched"] for c in cases),
        "degenerate": sum(c["degeneration"]["degenerate"] for c in cases),
        "errors": sum(c["error"] is not None for c in cases),
        "max_tokens": max_tokens,
        "seconds": time.monotonic() - t0,
    }
    status = "pass" if metrics["pass_fraction"] >= min_pass else "fail"
    findings.insert(
        0,
        f"Sanity questions on litert-lm (CPU, greedy, one fresh Engine per question): {passed}/{total} answered "
        f"as expected without degeneration.",
    )
    return gates.result(status, metrics, evidence, findings, cases=cases, min_pass_fraction=min_pass)


handle = handle_generation  # `python -m farm_toolchain gate_generation` also works through .handle
