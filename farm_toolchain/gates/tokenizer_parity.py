"""tokenizer_parity: does the bundle tokenize like the source repository's tokenizer.json?

Request:
    {"bundle_path": the .litertlm,
     "tokenizer_json": the source repository's tokenizer.json,
     optional "strings": [str | {"id", "script", "text"}] (default: farm_toolchain/data/tokenizer_strings.json,
               182 hand-written strings: English, numbers, code, chat markup, CJK, emoji, Hindi, Thai,
               Tamil, Arabic with harakat, Vietnamese, NFD forms, other scripts with combining marks),
     optional "add_special_tokens": bool (default false: what Engine.tokenize does, see below),
     optional "max_evidence": int (default 8), optional "require_round_trip": bool (default false)}
Result (the common gate response):
    status "pass" iff the runtime's ids equal the tokenizers library's ids on every string.
    metrics: strings_total, strings_equal, strings_mismatched, combining_mark_strings,
             combining_mark_mismatches, token counts, round-trip counts, add_special_tokens, seconds;
    "by_script": {script: {"strings", "mismatched"}}.
    evidence: the first mismatches with both id lists and token counts, then round-trip failures.

How it runs: one fresh Engine (CPU) for the whole string set; `Engine.tokenize(text)` against
`tokenizers.Tokenizer.from_file(tokenizer_json).encode(text, add_special_tokens=False)`, then
`Engine.detokenize(ids)` against the text (round trip) and against the tokenizers library's
`decode(ids, skip_special_tokens=False)`.

Measured on litert-lm 0.18.1 (CPU):
- Engine.tokenize does not run the tokenizer.json post-processor: a tokenizer.json whose
  TemplateProcessing adds a BOS gave ids without it (182/182 equal to add_special_tokens=False,
  0 to True). A start token is added by the session at prefill time from the LLM metadata, not by
  tokenize. So the reference is encode(..., add_special_tokens=False).
- Special tokens written in the text (<|im_start|>, <|im_end|>) become their single ids, as in the
  tokenizers library; detokenize writes them back out (no skipping).
- A round trip can differ from the input without any defect: the tokenizer's normalizer (e.g. NFC)
  runs before the ids are made, so NFD text comes back composed. Such cases are counted as
  "normalization"; any other difference as "other".
"""

from __future__ import annotations

import time
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

from farm_common.gates.tokenizer_parity import TokenizerParity
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

MAX_IDS_SHOWN = 80


def has_combining_marks(text: str) -> bool:
    return any(unicodedata.category(ch).startswith("M") for ch in text)


def _ids(ids: list[int]) -> str:
    shown = ids if len(ids) <= MAX_IDS_SHOWN else ids[:MAX_IDS_SHOWN] + ["…"]
    return "[" + ", ".join(str(i) for i in shown) + "]"


@MEASUREMENTS.register("tokenizer_parity")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    bundle = common.require_file(request, "bundle_path")
    tokenizer_json = common.require_file(request, "tokenizer_json")
    settings = common.settings(request, TokenizerParity)
    strings = common.load_strings(None if settings.strings is None else [
        x if isinstance(x, str) else x.model_dump() for x in settings.strings])
    add_special = common.bool_arg(request, "add_special_tokens", False)
    require_round_trip = settings.require_round_trip
    max_evidence = common.int_arg(request, "max_evidence", 8)

    from tokenizers import Tokenizer

    try:
        reference = Tokenizer.from_file(str(tokenizer_json))
    except Exception as exc:  # noqa: BLE001 - the tokenizers library raises its own Exception type
        raise BadInput(f"tokenizer_json {tokenizer_json} is not a tokenizers file: {exc}") from exc

    def normalize(text: str) -> str:
        return reference.normalizer.normalize_str(text) if reference.normalizer is not None else text

    mismatches: list[dict[str, Any]] = []
    round_trip: Counter[str] = Counter()
    round_trip_failures: list[dict[str, Any]] = []
    detok_differs: list[dict[str, Any]] = []
    by_script_total: Counter[str] = Counter()
    by_script_bad: Counter[str] = Counter()
    marks_total = marks_bad = 0
    tokens_runtime = tokens_reference = 0
    post_processor_adds = 0

    with common.fresh_engine(bundle) as engine:
        for s in strings:
            text = s["text"]
            by_script_total[s["script"]] += 1
            marks = has_combining_marks(text)
            marks_total += marks
            expected = reference.encode(text, add_special_tokens=add_special).ids
            if reference.encode(text, add_special_tokens=True).ids != reference.encode(
                text, add_special_tokens=False
            ).ids:
                post_processor_adds += 1
            got = engine.tokenize(text)
            tokens_runtime += len(got)
            tokens_reference += len(expected)
            if got != expected:
                by_script_bad[s["script"]] += 1
                marks_bad += marks
                mismatches.append({**s, "runtime": got, "reference": expected, "marks": marks})
            back = engine.detokenize(got)
            if back == text:
                round_trip["exact"] += 1
            elif back == normalize(text):
                round_trip["normalization"] += 1
            else:
                round_trip["other"] += 1
                round_trip_failures.append({**s, "back": back})
            ref_back = reference.decode(got, skip_special_tokens=False)
            if back != ref_back:
                detok_differs.append({**s, "back": back, "reference_back": ref_back})

    equal = len(strings) - len(mismatches)
    evidence: list[str] = []
    for m in mismatches[:max_evidence]:
        evidence.append(
            f"{m['id']} ({m['script']}{', combining marks' if m['marks'] else ''}) {m['text']!r}: "
            f"runtime {len(m['runtime'])} tokens {_ids(m['runtime'])} vs tokenizers "
            f"{len(m['reference'])} tokens {_ids(m['reference'])}"
        )
    if len(mismatches) > max_evidence:
        evidence.append(f"… and {len(mismatches) - max_evidence} more mismatching strings")
    for f in round_trip_failures[:max_evidence]:
        evidence.append(f"round trip {f['id']} ({f['script']}): {f['text']!r} came back as {f['back']!r}")
    for d in detok_differs[:max_evidence]:
        evidence.append(
            f"detokenize {d['id']}: runtime {d['back']!r} vs tokenizers decode {d['reference_back']!r}"
        )
    evidence.append(
        f"{equal}/{len(strings)} strings tokenize the same (Engine.tokenize vs tokenizers "
        f"{Path(tokenizer_json).name}, add_special_tokens={str(add_special).lower()}); "
        f"{marks_bad}/{marks_total} strings with combining marks differ"
    )

    findings: list[str] = []
    if mismatches:
        scripts = ", ".join(f"{k} {v}/{by_script_total[k]}" for k, v in sorted(by_script_bad.items()))
        findings.append(
            f"The bundle's tokenizer gives other token ids than the source repository's tokenizer.json "
            f"on {len(mismatches)} of {len(strings)} test strings ({scripts}); "
            f"{marks_bad} of them contain combining marks."
        )
    else:
        findings.append(
            f"The runtime's Engine.tokenize gives the same ids as the tokenizers library with the source "
            f"repository's tokenizer.json on {equal} of {len(strings)} test strings "
            f"({marks_total} with combining marks)."
        )
    if round_trip["normalization"]:
        findings.append(
            f"{round_trip['normalization']} strings come back from detokenize(tokenize(s)) in their "
            f"normalized form (the tokenizer's normalizer), not byte for byte."
        )
    if post_processor_adds and not add_special:
        findings.append(
            f"The tokenizer.json post-processor adds tokens to {post_processor_adds} strings; "
            f"Engine.tokenize does not apply it (the start token comes from the LLM metadata at prefill)."
        )

    status = "pass" if not mismatches else "fail"
    if require_round_trip and round_trip["other"]:
        status = "fail"
    metrics = {
        "strings_total": len(strings),
        "strings_equal": equal,
        "strings_mismatched": len(mismatches),
        "combining_mark_strings": marks_total,
        "combining_mark_mismatches": marks_bad,
        "tokens_runtime": tokens_runtime,
        "tokens_reference": tokens_reference,
        "round_trip_exact": round_trip["exact"],
        "round_trip_normalization_only": round_trip["normalization"],
        "round_trip_other": round_trip["other"],
        "detokenize_differs_from_tokenizers": len(detok_differs),
        "add_special_tokens": add_special,
        "post_processor_adds_tokens": post_processor_adds,
        "seconds": round(time.monotonic() - started, 3),
    }
    by_script = {
        k: {"strings": n, "mismatched": by_script_bad.get(k, 0)} for k, n in sorted(by_script_total.items())
    }
    return common.result(status, metrics, evidence, findings=findings, by_script=by_script)
