"""generation_parity: greedy litert-lm output of a bundle against PyTorch greedy on the same token ids.

Request:
    {"bundle_path": .litertlm, "model_dir": the HF folder it was converted from (the recorded reference),
     "reference_stop_ids": the source's own end-of-sequence ids,
     the settings of farm_common/gates/generation_parity.py GenerationParity, each optional with its default
     there: "prompts", "max_tokens", "chat_template" (render prompts with the source's template),
     "tie_margin" (logits), "min_tie_position", "min_exact_matches" (null: half the prompts, at
     least 1), "prefix_tokens" (0: off), "min_agree_fraction"}

Per prompt:
- The prompt is rendered once, by the source folder's tokenizer (`apply_chat_template([{"role":
  "user", "content": prompt}], add_generation_prompt=True)`, or the raw prompt when
  chat_template is false), and that same text goes to both sides.
- litert-lm: a fresh Engine (an Engine carries state from one session to the next; see
  state_isolation), `create_session(apply_prompt_template=False, greedy, max_output_tokens)`,
  `run_prefill([text])`, `run_decode().texts[0]`; its stop reason from the decoded token count: fewer
  than max_tokens = it stopped on a stop token of the bundle, else it ran to the cap.
- PyTorch: float32 greedy `generate` on the ids the runtime feeds (`Engine.tokenize(text)` with the
  bundle's start token in front: the session adds it at prefill), so both sides see identical input.
  It stops at the *source's* end-of-sequence ids (generation_config.json, recorded with the source),
  never at the bundle's stop tokens: a bundle whose metadata lacks the end-of-turn token would
  otherwise make the reference run on past its own end too, and the two runaways would agree
  (measured on SmolLM2: PyTorch's reply ran on past <|im_end|> into a new <|im_start|>system turn).

Pass rules (each recorded in the result):
- A prompt "matches" when the texts are identical and both sides stop for the same reason (stopped /
  ran to the cap). litert-lm running to the cap where PyTorch stopped is a difference: it is exactly
  the defect of a bundle that never ends its turn.
- A prompt that differs is a "near_tie" when the two part ways at generated token k >= min_tie_position
  where PyTorch's own top-1/top-2 logit margin is below tie_margin: a coin flip for any faithful int8
  file (measured on the tiny Qwen3.5: margin 0.00068 at the split). Token 0..min_tie_position-1 are
  never excused: a broken file (another seed's weights, the fused-GDN head bug) parts ways there.
- With prefix_tokens > 0 (an explicit allowance, off by default), a prompt also agrees when its
  first prefix_tokens tokens agree; never by a PyTorch reply shorter than the prefix. Measured on
  SmolLM2-135M int8: "Paris." vs "Paris, France." part ways at token 6 with a clear 0.30 margin.
- A reply that carries the text of one of the source's end-of-sequence tokens ran past the model's
  own end of turn: the bundle produced the token and did not stop on it (its metadata lacks that
  stop token). Such a prompt ("ran_past_end") is never excused by a near-tie or the prefix allowance.
- Status "pass" iff at least min_agree_fraction of the prompts agree (match, near_tie or prefix)
  and at least min_exact_matches prompts match exactly.
- Two things litert-lm 0.18.1 does to a reply's text, named rather than counted as the file's:
  at the cap it withholds trailing text that may begin one of the bundle's stop strings (the
  builder adds ":<|end_of_text|>\n"-like strings, so a reply of 16 ':' comes back as 15, measured
  on the tiny Granite): identical otherwise, it is a match; and its text ends at the first NUL
  character (measured on the tiny Ministral, whose random weights emit "\x00"): identical up to
  PyTorch's first NUL, the prompt is "cut_at_nul", it agrees, and the gate warns with a finding
  (a runtime pitfall for the card; what followed the NUL is not compared).
Faithful conversion includes the model's mistakes: a looping PyTorch reply that the bundle
reproduces is a match; the degeneration detector's verdict on both sides is reported, not gated here.
"""

from __future__ import annotations

import time
from typing import Any

from farm_common.gates.generation_parity import GenerationParity
from farm_toolchain import protocol
from farm_toolchain.gates import common, degeneration
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput


def withheld_at_cap(pt_text: str, lt_text: str, stop_strings: list[str]) -> tuple[str, str] | None:
    """(the withheld tail, the stop string it may begin) when the runtime's text is PyTorch's minus a
    trailing piece that is a proper prefix of a stop string (both ran to the cap), else None."""
    if lt_text == pt_text or not pt_text.startswith(lt_text):
        return None
    tail = pt_text[len(lt_text):]
    stop = next((s for s in stop_strings if s.startswith(tail) and s != tail), None)
    return (tail, stop) if stop is not None else None


def cut_at_nul(pt_text: str, lt_text: str) -> int | None:
    """Where PyTorch's reply has its first NUL, when the runtime's text is exactly what precedes it."""
    at = pt_text.find("\x00")
    return at if at >= 0 and lt_text == pt_text[:at] else None


def _matching_prefix(tokenizer: Any, ids: list[int], text: str) -> int:
    """The largest k such that PyTorch's first k tokens decode to a prefix of the runtime's text."""
    best = 0
    for k in range(1, len(ids) + 1):
        # No early exit: a byte-level token that ends mid-character decodes to U+FFFD until the
        # next token completes it, so a later k can match where an earlier one did not.
        if text.startswith(tokenizer.decode(ids[:k], skip_special_tokens=False)):
            best = k
    return best


def _stops_agree(pt_stop: str, lt_stop: str) -> bool:
    # A reference stop on the very last allowed token ("cap" from reference_generate) cannot be told
    # from a runaway by litert-lm's count, so the two agree only on identical texts (checked by the caller).
    return pt_stop == lt_stop


@MEASUREMENTS.register("generation_parity")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    bundle = common.require_file(request, "bundle_path", "the .litertlm to run")
    model_dir = common.model_folder(request)
    stop_ids = common.stop_ids_arg(request)
    p = common.settings(request, GenerationParity)
    prompts, max_tokens, use_template = p.prompts, p.max_tokens, p.chat_template
    tie_margin, min_tie_position, prefix_tokens = p.tie_margin, p.min_tie_position, p.prefix_tokens
    min_exact, min_agree = p.exact_matches_required(), p.min_agree_fraction
    common.sections(bundle)  # a readable bundle, or BadInput

    t0 = time.monotonic()
    tokenizer, model = common.load_reference(model_dir, protocol.progress)
    if use_template and not getattr(tokenizer, "chat_template", None):
        raise BadInput(f"chat_template is true but {model_dir} has no chat template")

    end_texts = [t for t in (tokenizer.decode([i], skip_special_tokens=False) for i in stop_ids) if t.strip()]
    meta = common.llm_metadata(bundle, common.sections(bundle))
    stop_strings = [t.token_str for t in (meta.stop_tokens if meta is not None else []) if not t.HasField("token_ids")]
    cases, evidence, findings = [], [], []
    for n, prompt in enumerate(prompts):
        if use_template:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        else:
            text = prompt
        hf_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        protocol.progress(f"prompt {n + 1}/{len(prompts)}: litert-lm")
        with common.fresh_engine(bundle, len(hf_ids) + max_tokens + 16, benchmark=True) as engine:
            rt_ids = engine.tokenize(text)
            bos = engine.bos_token_id
            input_ids = ([bos] if bos is not None else []) + rt_ids
            session = engine.create_session(
                apply_prompt_template=False, sampler_config=common.greedy_sampler(), max_output_tokens=max_tokens
            )
            try:
                t_lt = time.monotonic()
                session.run_prefill([text])
                lt_text = session.run_decode().texts[0]
                lt_seconds = time.monotonic() - t_lt
                lt_count = common.decode_count(session)
            finally:
                session.close()
        lt_stop = "unknown" if lt_count is None else ("stop" if lt_count < max_tokens else "cap")

        protocol.progress(f"prompt {n + 1}/{len(prompts)}: PyTorch")
        ref = common.reference_generate(model, input_ids, max_tokens, stop_ids)
        gen = ref["ids"]
        pt_text = tokenizer.decode(gen, skip_special_tokens=False)
        same_text = pt_text == lt_text
        held = withheld_at_cap(pt_text, lt_text, stop_strings) if ref["stop"] == lt_stop == "cap" else None
        nul = None if same_text or held else cut_at_nul(pt_text, lt_text)
        matched = (same_text or held is not None) and _stops_agree(ref["stop"], lt_stop)
        k = len(gen) if same_text else _matching_prefix(tokenizer, gen, lt_text)
        divergence = None
        if not matched and k < len(ref["margins"]):
            # How decided PyTorch itself was where the two first part ways (at the stop itself when the
            # texts agree and only the stop reason differs).
            divergence = {"token_index": k, "pytorch_top2_margin": ref["margins"][k]}
        ran_past_end = any(t in lt_text for t in end_texts)
        near_tie = bool(not ran_past_end and divergence and k >= min_tie_position
                        and divergence["pytorch_top2_margin"] < tie_margin)
        by_prefix = bool(not matched and not near_tie and not ran_past_end and prefix_tokens
                         and len(gen) >= prefix_tokens and k >= prefix_tokens)
        verdict = ("match" if matched else "ran_past_end" if ran_past_end else "cut_at_nul" if nul is not None
                   else "near_tie" if near_tie else "prefix" if by_prefix else "differs")
        pt_deg = degeneration.detect(pt_text, gen, max_tokens, hit_cap=ref["stop"] == "cap")
        lt_deg = degeneration.detect(lt_text, None, max_tokens, hit_cap=None if lt_count is None else lt_count >= max_tokens)
        cases.append({
            "prompt": prompt,
            "rendered": text,
            "prompt_ids": input_ids,
            "prompt_ids_match_source_tokenizer": rt_ids == hf_ids,
            "pytorch": {"text": pt_text, "ids": gen, "stop": ref["stop"], "stop_id": ref["stop_id"], "degeneration": pt_deg},
            "litert": {"text": lt_text, "decode_tokens": lt_count, "stop": lt_stop, "seconds": lt_seconds,
                       "degeneration": lt_deg},
            "verdict": verdict,
            "matched": matched,
            "prefix_tokens": k,
            "divergence": divergence,
            "withheld_at_cap": held[0] if held else None,
            "nul_at": nul,
        })
        how = (f"identical but for the trailing {held[0]!r} the runtime withholds at the cap (it may begin the stop "
               f"string {held[1]!r})" if held else
               "identical, same stop" if matched else
               f"litert-lm's text is PyTorch's up to its NUL at char {nul} and ends there" if nul is not None else
               f"identical text, but PyTorch {ref['stop']} and litert-lm {lt_stop}" if same_text else
               f"first {k} of {len(gen)} tokens agree")
        evidence.append(
            f"prompt {n + 1} {prompt!r} ({len(input_ids)} ids): pytorch {pt_text!r} [{ref['stop']}] | "
            f"litert-lm {lt_text!r} [{lt_stop}, {lt_count if lt_count is not None else '?'} tokens] | {how} -> {verdict}"
            + (f" (pytorch's top-1/top-2 margin at token {k}: {divergence['pytorch_top2_margin']:.4g})" if divergence else "")
        )
        evidence.append(f"prompt {n + 1} pytorch ids: {gen}")
        if rt_ids != hf_ids:
            findings.append(
                f"Prompt {n + 1}: the bundle's tokenizer gives {len(rt_ids)} ids, the source tokenizer {len(hf_ids)} "
                "for the same rendered text; PyTorch was given the bundle's ids."
            )

    total = len(cases)
    counts = {v: sum(c["verdict"] == v for c in cases)
              for v in ("match", "near_tie", "prefix", "cut_at_nul", "differs", "ran_past_end")}
    agree = counts["match"] + counts["near_tie"] + counts["prefix"] + counts["cut_at_nul"]
    runaways = sum(c["pytorch"]["stop"] == "stop" and c["litert"]["stop"] == "cap" for c in cases)
    metrics = {
        "prompts": total,
        "matched": counts["match"],
        "near_ties": counts["near_tie"],
        "prefix_agreements": counts["prefix"],
        "differs": counts["differs"],
        "ran_past_end": counts["ran_past_end"],
        "withheld_at_cap": sum(c["withheld_at_cap"] is not None for c in cases),
        "cut_at_nul": counts["cut_at_nul"],
        "agree_fraction": agree / total,
        "min_agree_fraction": min_agree,
        "min_exact_matches": min_exact,
        "tie_margin": tie_margin,
        "min_tie_position": min_tie_position,
        "prefix_tokens_allowed": prefix_tokens,
        "litert_ran_to_cap_where_pytorch_stopped": runaways,
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
    ok = agree / total >= min_agree and counts["match"] >= min_exact
    if ok:
        findings.insert(0, (
            f"Greedy litert-lm output (CPU) equals PyTorch float32 greedy output, stop included, on "
            f"{counts['match']} of {total} prompts ({max_tokens}-token cap)"
            + (f"; {counts['near_tie']} more part ways only at a near-tie of PyTorch's own (top-1/top-2 margin "
               f"below {tie_margin:g}, at token {min_tie_position} or later)" if counts["near_tie"] else "")
            + (f"; on {counts['prefix']} more the first {prefix_tokens} tokens agree and later ones differ"
               if counts["prefix"] else "") + "."
        ))
    else:
        why = []
        if counts["match"] < min_exact:
            why.append(f"{counts['match']} exact matches, {min_exact} required")
        if counts["ran_past_end"]:
            why.append(f"on {counts['ran_past_end']} prompt(s) litert-lm ran past the model's own end of turn "
                       f"(its reply carries {end_texts}: the bundle does not stop on that token)")
        if agree / total < min_agree:
            why.append(f"{total - agree} of {total} prompts differ beyond the allowances")
        if runaways:
            why.append(f"on {runaways} prompt(s) litert-lm ran to the {max_tokens}-token cap where PyTorch "
                       "ended its reply (does the bundle stop on the end-of-turn token?)")
        findings.insert(0, "Greedy output differs from PyTorch: " + "; ".join(why) + ".")
    both = [i + 1 for i, c in enumerate(cases)
            if c["pytorch"]["degeneration"]["degenerate"] and c["litert"]["degeneration"]["degenerate"]]
    if both:
        findings.append(f"Prompts {both}: PyTorch and litert-lm both degenerate (the model's own behaviour, "
                        "reproduced faithfully).")
    only_lt = [i + 1 for i, c in enumerate(cases)
               if c["litert"]["degeneration"]["degenerate"] and not c["pytorch"]["degeneration"]["degenerate"]]
    if only_lt:
        findings.append(f"Prompts {only_lt}: litert-lm degenerates where PyTorch does not.")
    cut = [i + 1 for i, c in enumerate(cases) if c["verdict"] == "cut_at_nul"]
    if cut:
        findings.append(f"litert-lm {common.runtime_info()['version']} returns a reply cut at its first NUL character: "
                        f"on prompt(s) {cut} PyTorch's reply carries a NUL and the runtime's text is PyTorch's up to it, then ends "
                        "(a defect of the runtime's text output, not of this file; what followed the NUL is not "
                        "compared).")
    status = "fail" if not ok else "warn" if cut else "pass"
    return common.result(status, metrics, evidence, findings, cases=cases, apply_chat_template=use_template)
