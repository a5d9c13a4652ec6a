"""Degeneration detector for generated replies: standard library only (the orchestrator imports it too).

`detect(text, token_ids, max_tokens)` flags the failure the seed cards describe on the CPU backend: a
reply that repeats one line, or one shorter unit ("= 17 × 23 = 17 × 23 …", "$391$ $391$ …"), until the
token cap cuts it off; and an empty reply. A reply that repeats itself a few times and then ends on its
own is not flagged: the loop the cards mean runs to the cap.

Rules:
- "empty": the reply is empty or whitespace only (always degenerate).
- Whether the reply reached the cap: `hit_cap` if given; else `len(token_ids) >= max_tokens` when
  both are given; else unknown. A reply known to have ended before the cap is never "repeated_*".
- "repeated_line": the reply's last non-blank lines are one line repeated at least `LINE_REPEATS`
  times in a row (blank lines between them ignored; a final line cut off by the cap counts when it is
  a prefix of the repeated line). With an unknown cap, one more repetition is required.
- "repeated_ngram": the tail of the reply is periodic: a unit of p tokens (token_ids given) or p
  characters (no token ids) repeats at least `NGRAM_REPEATS` times and the periodic tail covers at
  least `NGRAM_COVERAGE` of the reply (units of one token / one character need `SINGLE_UNIT_REPEATS`).
  With an unknown cap: one more repetition and at least `NGRAM_COVERAGE_UNKNOWN_CAP` of the reply.
"""

from __future__ import annotations

from typing import Any, Sequence

LINE_REPEATS = 3
NGRAM_REPEATS = 3
SINGLE_UNIT_REPEATS = 8
NGRAM_COVERAGE = 0.3
NGRAM_COVERAGE_UNKNOWN_CAP = 0.5
MAX_PERIOD = 400  # units; a "loop" longer than this is not what the detector is for


def _result(degenerate: bool, reason: str | None, detail: str) -> dict[str, Any]:
    return {"degenerate": degenerate, "reason": reason, "detail": detail}


def _short(s: str, limit: int = 80) -> str:
    return repr(s if len(s) <= limit else s[: limit - 1] + "…")


def _tail_period(seq: Sequence[Any], min_repeats: float, min_coverage: float, single_unit_repeats: float):
    """Smallest period p whose periodic tail satisfies the thresholds: (p, tail_length) or None."""
    n = len(seq)
    for p in range(1, min(MAX_PERIOD, n // 2) + 1):
        run = 0
        i = n - 1
        while i >= p and seq[i] == seq[i - p]:
            run += 1
            i -= 1
        tail = run + p
        reps = tail / p
        need = single_unit_repeats if p == 1 else min_repeats
        if reps >= need and tail >= min_coverage * n:
            return p, tail
    return None


def _repeated_line(text: str, min_repeats: int, maybe_cut: bool):
    lines = [ln.strip() for ln in text.split("\n")]
    lines = [ln for ln in lines if ln]
    if len(lines) < min_repeats:
        return None
    last = lines[-1]
    if maybe_cut and not text.endswith("\n") and len(lines) >= 2 and lines[-2] != last and lines[-2].startswith(last):
        lines = lines[:-1]  # the cap cut the last repetition short
    last = lines[-1]
    count = 0
    for ln in reversed(lines):
        if ln != last:
            break
        count += 1
    return (last, count) if count >= min_repeats else None


def detect(
    text: str,
    token_ids: list[int] | None = None,
    max_tokens: int | None = None,
    *,
    hit_cap: bool | None = None,
) -> dict[str, Any]:
    """{"degenerate": bool, "reason": "empty" | "repeated_line" | "repeated_ngram" | None, "detail": str}."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if text.strip() == "":
        return _result(True, "empty", f"the reply is empty ({len(text)} characters of whitespace)")

    if hit_cap is None and token_ids is not None and max_tokens:
        hit_cap = len(token_ids) >= max_tokens
    unknown = hit_cap is None
    extra = 1 if unknown else 0
    cap_note = (
        "token cap not known"
        if unknown
        else (f"reached the {max_tokens}-token cap" if max_tokens else "reached the token cap")
    )

    line = _repeated_line(text, LINE_REPEATS + extra, maybe_cut=hit_cap is not False)
    units: Sequence[Any] = token_ids if token_ids else text
    unit_name = "tokens" if token_ids else "characters"
    periodic = _tail_period(
        units,
        NGRAM_REPEATS + extra,
        NGRAM_COVERAGE_UNKNOWN_CAP if unknown else NGRAM_COVERAGE,
        SINGLE_UNIT_REPEATS + extra,
    )

    if hit_cap is False:
        if line or periodic:
            what = f"line {_short(line[0])} ×{line[1]}" if line else f"a {periodic[0]}-{unit_name[:-1]} unit"
            return _result(False, None, f"repeats {what} but ended before the token cap")
        return _result(False, None, "ended before the token cap; no repetition to the cap")

    if line:
        return _result(
            True,
            "repeated_line",
            f"the last {line[1]} non-blank lines are the same line {_short(line[0])} ({cap_note})",
        )
    if periodic:
        p, tail = periodic
        start = len(units) - tail
        unit = units[start : start + p]
        shown = _short(unit) if isinstance(unit, str) else str(list(unit)[:20])
        return _result(
            True,
            "repeated_ngram",
            f"the last {tail} of {len(units)} {unit_name} repeat a {p}-{unit_name[:-1]} unit "
            f"{tail / p:.1f} times: {shown} ({cap_note})",
        )
    return _result(False, None, f"no repetition to the cap ({cap_note})")
