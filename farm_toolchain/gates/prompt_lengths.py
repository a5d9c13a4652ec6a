"""prompt_lengths: the first generated token is right at every prompt length that crosses a
prefill signature boundary, a fresh Engine per length.

Request:
    {"bundle_path": the .litertlm,
     "model_dir": the Hugging Face folder it was converted from (PyTorch reference + tokenizer.json),
     optional "lengths": [int] prompt lengths in tokens, start token included (default: see below),
     "reference_stop_ids": the source's end-of-sequence ids (recorded with the source),
     optional "text": str, the text prompts are cut from (default: the shipped tokenizer strings,
               chat markup left out, repeated as needed),
     the settings of farm_common/gates/prompt_lengths.py PromptLengths, with their defaults there:
     "max_cases", "tie_margin" (in logits), "max_logprob_diff" (in nats)}
Result (the common gate response): status "pass" iff no length gives a first token that differs from
PyTorch's greedy first token beyond a near tie, no length fails to run, and no length's first-token
log-probability differs from PyTorch's by more than max_logprob_diff; "warn" when the only excess is
scores over that limit on a model whose config declares known_score_drift (`gate_status`).
    metrics: lengths_total, lengths_clean, lengths_near_tie, lengths_mismatch, lengths_error,
             max_length, prefill_signatures, cache_length, lengths_scored, max_logprob_diff,
             mean_logprob_diff, seconds;
    "cases": [{"length", "boundary", "runtime_text", "reference_text", "reference_id", "verdict", …}];
    evidence: one line per length.

Lengths: for each prefill_<N> signature of the bundle's TFLite section, kN-1, kN and kN+1 for k = 1,
2, … up to the limit (cache length from the mask input, or the metadata's max_num_tokens, minus the one
generated token), plus 1, 2 and the limit. With more than max_cases lengths, every N-1/N/N+1 and
2N-1/2N/2N+1 and the limit are kept and the rest are thinned evenly.

Prompts of an exact token count: the runtime takes text, not ids, so each prompt is a window of ids
of the base text whose decoded text re-tokenizes to exactly those ids, both with the tokenizers
library and with the Engine's own `tokenize` (windows that do not are skipped). The session is
`create_session(apply_prompt_template=False)`: measured on litert-lm 0.18.1, it still prepends the LLM
metadata's start token (a bundle with start token <|endoftext|> agreed with PyTorch on [bos] + ids at
34/37 lengths against 32/37 without it, the 3 others being withheld text, below), so the reference is
PyTorch on [start token] + ids and a length counts the start token.

Comparing one token by its text: the runtime returns text only. Verdicts:
- "match": the runtime's text is PyTorch's top-1 token text (byte-level tokens that are partial
  UTF-8 decode to U+FFFD on both sides; such a match is marked ambiguous in the evidence);
- "match" also when the runtime's 1-token text is empty and PyTorch's top-1 is a stop token, or its
  text is a prefix of a stop string and a 4-token run starts with it: litert-lm withholds text that may
  begin a stop string (litert-torch writes stop strings such as "]<|im_end|>\\n") and drops it when
  max_output_tokens is reached — measured: "]" gave '' with 1 token and '] s' with 2;
- "near_tie": a different token whose PyTorch logit is within tie_margin (an absolute logit margin,
  the same meaning as generation_parity's) of the top-1. A margin relative to the vocabulary's logit
  range excused 0.7 logits on a trained model: a confident token lost, not a tie;
- "mismatch" otherwise; "error" when prefill or decode raised.

Score check (always; a length whose token cannot be scored says so): on another fresh Engine,
`Session.run_text_scoring([prompt + top-1 text])` gives, as its last score, the runtime's
log-probability of PyTorch's top-1 token after the prompt, compared with PyTorch's (only where the
concatenation re-tokenizes to the prompt's ids plus that token); the difference is gated
(max_logprob_diff, default 1 nat: int8 SmolLM2 moves single tokens by up to 0.7 nats, another
seed's weights by several), because a first token can stay the argmax while its probability moves a
long way. (run_text_scoring after run_prefill does not score the next token given the prefill:
measured, see measure().) Caveat, measured: a random tiny model barely uses
context beyond the last tokens — dropping the token at the first prefill boundary changed PyTorch's
first token at 0 of 20 lengths and its log-prob by ≤ 0.014 — so on such models this gate proves that
every chunk plan runs and ends in the right place, not that mid-prompt state is exact; trained models
are far more context-sensitive.
"""

from __future__ import annotations

import time
from typing import Any

from farm_common.gates.prompt_lengths import PromptLengths
from farm_toolchain import protocol
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

REPLACEMENT = "\ufffd"
RETRY_TOKENS = 4


def plan_lengths(prefills: list[int], limit: int, max_cases: int) -> list[int]:
    """The prompt lengths that cross every prefill boundary up to `limit` (inclusive)."""
    if limit < 1:
        return []
    wanted = {x for x in (1, 2, limit) if x <= limit}
    keep = set(wanted)
    for n in prefills:
        k = 1
        while k * n - 1 <= limit:
            for d in (-1, 0, 1):
                length = k * n + d
                if 1 <= length <= limit:
                    wanted.add(length)
                    if k <= 2:
                        keep.add(length)
            k += 1
    ordered = sorted(wanted)
    if len(ordered) <= max_cases:
        return ordered
    rest = [x for x in ordered if x not in keep]
    room = max(0, max_cases - len(keep))
    if room and rest:
        step = len(rest) / room
        keep.update(rest[int(i * step)] for i in range(room))
    return sorted(keep)


def boundary(length: int, prefills: list[int]) -> str:
    """Where a length sits: e.g. "2×8+1" for 17 with a prefill_8 signature (nearest multiple of the
    largest signature it reaches)."""
    for n in sorted(prefills, reverse=True):
        k = round(length / n)
        if k >= 1 and abs(length - k * n) <= 1:
            d = length - k * n
            return f"{k}×{n}" + ("" if d == 0 else f"{d:+d}")
    return "between boundaries"


def _base_text(request: dict[str, Any]) -> str:
    text = request.get("text")
    if text is not None:
        if not isinstance(text, str) or not text.strip():
            raise BadInput("text must be a non-empty string")
        return text
    return "\n".join(s["text"] for s in common.load_strings() if s["script"] not in ("chat_markup", "whitespace"))


def _start_ids(meta, tokenizer) -> list[int]:
    if meta is None or not meta.HasField("start_token"):
        return []
    t = meta.start_token
    if t.HasField("token_ids"):
        return list(t.token_ids.ids)
    tid = tokenizer.token_to_id(t.token_str)
    return [tid] if tid is not None else tokenizer.encode(t.token_str, add_special_tokens=False).ids


def _stop_strings(meta) -> list[str]:
    """The bundle's stop strings: the runtime withholds text that may begin one (see _judge)."""
    return [t.token_str for t in (meta.stop_tokens if meta is not None else []) if not t.HasField("token_ids")]


@MEASUREMENTS.register("prompt_lengths")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    bundle = common.require_file(request, "bundle_path")
    model_dir = common.model_folder(request)
    # The reference's stops are the source's, never the bundle's (which may lack the very token).
    stop_ids = set(common.stop_ids_arg(request))
    settings = common.settings(request, PromptLengths)
    max_cases, tie_margin, max_lp_diff = settings.max_cases, settings.tie_margin, settings.max_logprob_diff
    base_text = _base_text(request)

    plan = common.prefill_plan(bundle)
    prefills = plan["prefill_lengths"]
    capacity = min(x for x in (plan["cache_length"], plan["max_num_tokens"]) if x) if (
        plan["cache_length"] or plan["max_num_tokens"]) else None
    if not prefills or not capacity:
        raise BadInput(f"{bundle} has no prefill_<N> signature or no cache length (signatures: {plan['signatures']})")
    limit = capacity - 1  # one generated token
    lengths = request.get("lengths")
    if lengths is None:
        lengths = plan_lengths(prefills, limit, max_cases)
    elif (not isinstance(lengths, list) or not lengths
          or not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= limit for x in lengths)):
        raise BadInput(f"lengths must be a non-empty list of integers in [1, {limit}] (cache {capacity} - 1)")
    lengths = sorted(set(lengths))

    from tokenizers import Tokenizer

    tok_path = model_dir / "tokenizer.json"
    if tok_path.is_file():
        tokenizer = Tokenizer.from_file(str(tok_path))
    else:
        raw = common.hf_tokenizer_json(bundle)
        if raw is None:
            raise BadInput(f"{model_dir} has no tokenizer.json and the bundle has no HF tokenizer section")
        tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
    meta = common.llm_metadata(bundle)
    start_ids = _start_ids(meta, tokenizer)
    stop_strings = _stop_strings(meta)
    special = set(tokenizer.get_added_tokens_decoder().keys())  # never cut prompts with special tokens

    import torch

    _hf_tokenizer, model = common.load_reference(model_dir, protocol.progress)

    base_ids = tokenizer.encode(base_text, add_special_tokens=False).ids
    base_ids = [i for i in base_ids if i not in special]
    need = max(lengths) + 256
    if not base_ids:
        raise BadInput("the base text tokenizes to nothing")
    while len(base_ids) < need:
        base_ids = base_ids + base_ids

    def decode_one(i: int) -> str:
        return tokenizer.decode([i], skip_special_tokens=False)

    cases: list[dict[str, Any]] = []
    sampler = common.greedy_sampler()
    for length in lengths:
        body = length - len(start_ids)
        case: dict[str, Any] = {"length": length, "boundary": boundary(length, prefills)}
        cases.append(case)
        if body < 1:
            case.update(verdict="skipped", detail=f"the start token alone is {len(start_ids)} tokens")
            continue
        window = text = None
        t0 = time.monotonic()
        with common.fresh_engine(bundle) as engine:
            for offset in range(0, min(400, len(base_ids) - body)):
                cand = base_ids[offset : offset + body]
                s = tokenizer.decode(cand, skip_special_tokens=False)
                if tokenizer.encode(s, add_special_tokens=False).ids != cand:
                    continue
                if engine.tokenize(s) != cand:
                    continue
                window, text, case["offset"] = cand, s, offset
                break
            if window is None:
                case.update(verdict="error", detail="no window of the base text re-tokenizes to exactly this many ids")
                continue
            with common.native_errors() as native:
                try:
                    session = engine.create_session(
                        apply_prompt_template=False, sampler_config=sampler, max_output_tokens=1
                    )
                    session.run_prefill([text])
                    got = session.run_decode().texts
                    runtime_text = got[0] if got else ""
                    session.close()
                    error = None
                except Exception as exc:  # noqa: BLE001 - a runtime failure at this length is the finding
                    error = f"{type(exc).__name__}: {exc}"
            if error is not None:
                reason = common.first_native_error(native)
                case.update(verdict="error", detail=error + (f" (runtime: {reason})" if reason else ""))
                continue
        with torch.no_grad():
            logits = model(torch.tensor([start_ids + window])).logits[0, -1].float()
        top = torch.topk(logits, 5)
        ref_id = int(top.indices[0])
        ref_text = decode_one(ref_id)
        case.update(
            runtime_text=runtime_text,
            reference_id=ref_id,
            reference_text=ref_text,
            reference_top=[[int(i), decode_one(int(i)), round(float(v), 4)] for v, i in zip(top.values, top.indices)],
        )
        verdict, detail = _judge(runtime_text, ref_id, ref_text, stop_ids, stop_strings)
        if verdict == "withheld":
            # Confirm with a longer run on another fresh Engine.
            with common.fresh_engine(bundle) as engine:
                session = engine.create_session(
                    apply_prompt_template=False, sampler_config=sampler, max_output_tokens=RETRY_TOKENS
                )
                session.run_prefill([text])
                longer = (session.run_decode().texts or [""])[0]
                session.close()
            case["runtime_text_4"] = longer
            verdict = "match" if longer.startswith(ref_text) else "mismatch"
            detail = (f"1-token text withheld (prefix of a stop string); {RETRY_TOKENS}-token run {longer!r} "
                      f"{'starts' if verdict == 'match' else 'does not start'} with {ref_text!r}")
            if verdict == "mismatch" and longer == "" and length + RETRY_TOKENS > capacity:
                # No room left in the cache for a longer run (measured: the tiny qwen2 at 63 of 64): the
                # runtime's score of the token decides below, as for a NUL.
                verdict, detail = "by_score", detail + f" (no room for more than {capacity - length} token(s))"
        if verdict == "mismatch":
            # A near tie: a token with the runtime's text whose PyTorch logit is close to the top-1.
            same_text = [i for i in range(int(logits.shape[0])) if runtime_text and decode_one(i) == runtime_text]
            if same_text:
                best = max(same_text, key=lambda i: float(logits[i]))
                gap = float(logits[ref_id] - logits[best])
                case["runtime_candidate_id"], case["logit_gap"] = best, round(gap, 5)
                if gap <= tie_margin:
                    verdict = "near_tie"
                    detail = (f"runtime {runtime_text!r} (id {best}) is PyTorch's logit {float(logits[best]):.4f}, "
                              f"{gap:.4f} below the top-1 {ref_text!r} (margin {tie_margin:g})")
        case["verdict"], case["detail"] = verdict, detail
        # The log-probability of PyTorch's top-1 token in the runtime against PyTorch's: a number
        # that moves with the whole state, where the first token's text moves only when the argmax
        # does. Measured on litert-lm 0.18.1: run_text_scoring after run_prefill does not score the
        # next token given the prefill (SmolLM2: the token greedy decoding picked scored -5.3 nats
        # against PyTorch's -0.47), while scoring the whole text in one call agrees with PyTorch
        # token by token (int8 SmolLM2: within 0.7 nats). So the prompt and the token are scored
        # together, on another fresh Engine, and the last score is the token's.
        scored_text = text + ref_text
        with common.fresh_engine(bundle) as engine:
            rt_ids = engine.tokenize(scored_text)
            if rt_ids != window + [ref_id]:
                case["score_error"] = (f"the prompt followed by PyTorch's top-1 {ref_text!r} re-tokenizes to other "
                                       "ids: not scored")
            else:
                try:
                    session = engine.create_session(apply_prompt_template=False, sampler_config=sampler)
                    scored = session.run_text_scoring([scored_text], store_token_lengths=True)
                    session.close()
                    scores = scored.token_scores[0] if scored.token_scores else []
                    runtime_lp = float(scores[-1])
                    torch_lp = float(torch.log_softmax(logits, -1)[ref_id])
                    case["runtime_logprob"], case["reference_logprob"] = round(runtime_lp, 5), round(torch_lp, 5)
                    case["logprob_diff"] = round(abs(runtime_lp - torch_lp), 5)
                except Exception as exc:  # noqa: BLE001 - recorded; a length that cannot be scored says so
                    case["score_error"] = f"{type(exc).__name__}: {exc}"
        if case.get("verdict") == "by_score":
            # An empty runtime text its 1-token run cannot explain (a NUL, whose text litert-lm drops;
            # withheld text with no room for a longer run): the runtime's own score of PyTorch's
            # token decides. Agreeing, only the text was missing (a NUL's loss is said in a finding).
            agrees = case.get("logprob_diff") is not None and case["logprob_diff"] <= max_lp_diff
            # A by-score case that cannot be scored (the prompt with PyTorch's token re-tokenizes
            # otherwise: a trailing space merges; litert-lm's tokenize drops a NUL too) is
            # unconfirmed: said (warn), neither excused as a match nor a failure. A score that
            # differs is a mismatch.
            unconfirmable = "score_error" in case
            case["verdict"] = "match" if agrees else "unconfirmed" if unconfirmable else "mismatch"
            case["nul_text_lost"] = agrees and set(ref_text) == {"\x00"}
            case["detail"] += (f"; the runtime scores it within {max_lp_diff:g} nat of PyTorch: only its text was missing"
                               if agrees else
                               f"; not confirmed by the runtime's score ({case.get('score_error') or 'it differs'})")
        case["seconds"] = round(time.monotonic() - t0, 3)

    verdicts = ("match", "near_tie", "unconfirmed", "mismatch", "error", "skipped")
    counts = {v: sum(c.get("verdict") == v for c in cases) for v in verdicts}
    evidence = [_evidence_line(c) for c in cases]
    diffs = [c["logprob_diff"] for c in cases if "logprob_diff" in c]
    over = [c for c in cases if c.get("logprob_diff", 0) > max_lp_diff]
    ran = len(cases) - counts["skipped"]
    status, findings = gate_status(cases, max_lp_diff, settings.known_score_drift)
    if status in ("pass", "warn"):
        findings.append(
            f"Prompt-length robustness: the first token agrees with PyTorch at {counts['match'] + counts['near_tie']}"
            f" of {ran} prompt lengths from {min(lengths)} to {max(lengths)} tokens, crossing every boundary of "
            f"{', '.join(f'prefill_{n}' for n in prefills)} (cache {capacity}), a fresh Engine per length"
            + (f"; {counts['near_tie']} of them are near ties" if counts["near_tie"] else "") + "."
        )
    metrics = {
        "lengths_total": len(cases),
        "lengths_clean": counts["match"],
        "lengths_near_tie": counts["near_tie"],
        "lengths_mismatch": counts["mismatch"],
        "lengths_unconfirmed": counts["unconfirmed"],
        "lengths_error": counts["error"],
        "lengths_skipped": counts["skipped"],
        "min_length": min(lengths),
        "max_length": max(lengths),
        "prefill_signatures": len(prefills),
        "smallest_prefill": min(prefills),
        "largest_prefill": max(prefills),
        "cache_length": capacity,
        "start_tokens": len(start_ids),
        "tie_margin": tie_margin,
        "lengths_scored": len(diffs),
        "max_logprob_diff": max(diffs) if diffs else None,
        "mean_logprob_diff": sum(diffs) / len(diffs) if diffs else None,
        "logprob_diff_limit": max_lp_diff,
        "lengths_over_logprob_limit": len(over),
        "seconds": round(time.monotonic() - started, 3),
    }
    return common.result(status, metrics, evidence, findings=findings, cases=cases)


def gate_status(cases: list[dict[str, Any]], max_lp_diff: float, known_score_drift: str | None) -> tuple[str, list[str]]:
    """The gate's status and its failure findings from the per-length cases (pure).

    fail: a first token differs (beyond a near tie) or a length fails to run; or no length could be
    scored; or a score is over the limit with no declared drift. warn: every first token agrees and
    the only excess is scores over the limit, on a model whose config declares (known_score_drift,
    with the measurement) that litert-lm's run_text_scoring differs from PyTorch on a near-float
    bundle too, so the excess is the runtime's scoring, not the file's. A token that differs still
    fails."""
    ran = [c for c in cases if c.get("verdict") != "skipped"]
    wrong = [c for c in ran if c.get("verdict") in ("mismatch", "error")]
    over = [c for c in ran if c.get("logprob_diff", 0) > max_lp_diff]
    scored = [c for c in ran if "logprob_diff" in c]
    findings: list[str] = []
    if ran and not scored:
        # A check that measured nothing must not read as a pass.
        findings.append("No prompt length could be scored (run_text_scoring), so the log-probability check "
                        "measured nothing: " + "; ".join(sorted({c.get("score_error", "") for c in cases})[:3]))
    if wrong:
        findings.append(f"The first generated token differs from PyTorch's greedy token, or the run fails, at "
                        f"{len(wrong)} of {len(ran)} prompt lengths ({', '.join(str(c['length']) for c in wrong[:12])}).")
    if over:
        lengths = ", ".join(str(c["length"]) for c in over[:12])
        line = (f"The runtime's log-probability of PyTorch's first token differs from PyTorch's by more than "
                f"{max_lp_diff:g} nat at {len(over)} of {len(scored)} scored lengths ({lengths}; "
                f"max {max(c['logprob_diff'] for c in over):.2f})")
        findings.append(line + (f"; declared known for this model: {known_score_drift}" if known_score_drift else "."))
    unconfirmed = [c for c in ran if c.get("verdict") == "unconfirmed"]
    if unconfirmed:
        findings.append(f"At {len(unconfirmed)} prompt length(s) ({', '.join(str(c['length']) for c in unconfirmed[:12])}) "
                        "the runtime's first token could not be confirmed: its text is empty where PyTorch's token is "
                        "a NUL (litert-lm's text ends at a NUL) or is withheld with no room in the cache for a longer "
                        "run, and the prompt with PyTorch's token re-tokenizes otherwise, so it cannot be scored.")
    lost = [c for c in ran if c.get("nul_text_lost")]
    if lost:
        findings.append(f"litert-lm returns no text for a NUL token: at {len(lost)} prompt length(s) "
                        f"({', '.join(str(c['length']) for c in lost[:12])}) PyTorch's first token is NUL, the "
                        "runtime's text is empty and its score of NUL agrees with PyTorch's (a defect of the "
                        "runtime's text output, not of this file).")
    if wrong or (ran and not scored) or (over and not known_score_drift):
        return "fail", findings
    return ("warn" if over or lost or unconfirmed else "pass"), findings


def _judge(runtime_text: str, ref_id: int, ref_text: str, stop_ids: set[int], stop_strings: list[str]):
    if runtime_text == ref_text and runtime_text:
        if REPLACEMENT in ref_text:
            return "match", "same text (partial UTF-8 byte token: ambiguous by text)"
        return "match", "same text"
    if runtime_text == "":
        if ref_id in stop_ids:
            return "match", f"PyTorch's top-1 is the stop token {ref_text!r}; the runtime stopped"
        if ref_text and any(s.startswith(ref_text) and s != ref_text for s in stop_strings):
            return "withheld", ""
        if ref_text and set(ref_text) == {"\x00"}:
            # litert-lm's text ends at a NUL (generation_parity): the scores below decide.
            return "by_score", f"runtime text empty where PyTorch's top-1 is NUL (id {ref_id})"
    return "mismatch", f"runtime {runtime_text!r} vs PyTorch top-1 {ref_text!r} (id {ref_id})"


def _evidence_line(c: dict[str, Any]) -> str:
    head = f"length {c['length']} ({c['boundary']}): {c.get('verdict')}"
    if "runtime_text" not in c:
        return f"{head}: {c.get('detail', '')}"
    top = ", ".join(f"{t!r} {v}" for _i, t, v in c["reference_top"][:3])
    score = (f"; log-prob of the top-1: runtime {c['runtime_logprob']}, PyTorch {c['reference_logprob']}"
             if "logprob_diff" in c else "")
    return (f"{head}: runtime {c['runtime_text']!r}, PyTorch top-1 {c['reference_text']!r} "
            f"(id {c['reference_id']}; top-3 {top}); {c.get('detail', '')}{score}")
