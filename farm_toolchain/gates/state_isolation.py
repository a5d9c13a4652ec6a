"""state_isolation: does a conversation on a used Engine answer as it does on a fresh one?

Request: {"bundle_path", optional "pairs": [{"a": conv, "b": conv}] with conv = {"system": str | null,
          "turns": [user messages], optional "max_output_tokens"} (default: 7 pairs, below), optional
          "max_output_tokens": int, optional "known_difference": str (the reason a difference is known
          runtime behaviour of this family, declared in the build config)}
For each pair: conversation A then conversation B on one Engine, against B alone on a fresh Engine
(greedy). Status:
- "fail": B differs after A and no known_difference is declared (the leak this gate exists to find:
  state from one conversation reaching the next), or a conversation fails on a fresh Engine (a failure
  of the file itself);
- "warn": B differs and the config declares it as known runtime behaviour, with its reason (measured
  on litert-lm 0.18.1: a new conversation reuses the prompt tokens it shares with the previous one and
  the recurrent state of Qwen3.5's linear-attention layers is not reset). The finding names the reason,
  and a model card must carry it ("one Engine per conversation");
- "pass": every B answered the same on the used and the fresh Engine.
"""

from __future__ import annotations

import time
from typing import Any

from farm_common.gates.state_isolation import StateIsolation
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

# Whether B shows A's state depends on how long A was (measured on the tiny Qwen3.5 bundle, litert-lm
# 0.18.1: with A "Capital of France?", B "Hello!" differed after A replies of 1, 2 or 4 tokens and not
# after 3, 5, 6 or 8), so the default pairs vary A's reply length, then try the system-prompt cases of
# the seed card (a different and the same system prompt).
_A = "What is the capital of France?"
DEFAULT_PAIRS = [
    *({"a": {"system": None, "turns": [_A], "max_output_tokens": n}, "b": {"system": None, "turns": ["Hello!"]}}
      for n in (1, 2, 3, 4)),
    {"a": {"system": None, "turns": [_A]}, "b": {"system": None, "turns": ["Hello!"]}},
    {"a": {"system": "Answer in French.", "turns": ["What is 2 + 3?"]},
     "b": {"system": "Talk like a pirate.", "turns": ["Hello!"]}},
    {"a": {"system": "You are a helpful assistant.", "turns": ["Name a fruit."]},
     "b": {"system": "You are a helpful assistant.", "turns": ["Name a planet."]}},
]


def _conv_spec(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise BadInput(f"{where} must be an object {{system, turns}}")
    system = raw.get("system")
    turns = raw.get("turns")
    if system is not None and (not isinstance(system, str) or not system):
        raise BadInput(f"{where}.system must be a non-empty string or null")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
        raise BadInput(f"{where}.turns must be a non-empty list of user messages")
    n = raw.get("max_output_tokens")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise BadInput(f"{where}.max_output_tokens must be a positive integer or null")
    return {"system": system, "turns": turns, "max_output_tokens": n}


def _run_conversation(engine: Any, spec: dict[str, Any], max_out: int) -> dict[str, Any]:
    conv = engine.create_conversation(
        messages=[{"role": "system", "content": spec["system"]}] if spec["system"] else None,
        sampler_config=common.greedy_sampler(),
        max_output_tokens=spec.get("max_output_tokens") or max_out,
    )
    replies: list[str] = []
    try:
        with common.native_errors() as native:
            try:
                for turn in spec["turns"]:
                    replies.append(common.message_text(conv.send_message(turn)))
                error = None
            except Exception as exc:  # noqa: BLE001 - recorded, compared
                error = f"{type(exc).__name__}: {exc}"
        if error is not None:
            reason = common.first_native_error(native)
            return {"replies": replies, "error": error + (f" (runtime: {reason})" if reason else ""),
                    "token_count": None}
        return {"replies": replies, "error": None, "token_count": conv.token_count}
    finally:
        conv.close()


@MEASUREMENTS.register("state_isolation")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    bundle = common.require_file(request, "bundle_path")
    settings = common.settings(request, StateIsolation)
    known = settings.known_difference
    raw_pairs = request.get("pairs", DEFAULT_PAIRS)
    if not isinstance(raw_pairs, list) or not raw_pairs:
        raise BadInput("pairs must be a non-empty list of {a, b} conversations")
    pairs = [
        {"a": _conv_spec(p.get("a") if isinstance(p, dict) else None, f"pairs[{i}].a"),
         "b": _conv_spec(p.get("b") if isinstance(p, dict) else None, f"pairs[{i}].b")}
        for i, p in enumerate(raw_pairs)
    ]
    # No max_output_tokens given: from the bundle's capacity.
    max_out = settings.max_output_tokens or max(2, min(32, common.capacity(bundle) // 16))

    rows = []
    evidence = []
    for i, pair in enumerate(pairs):
        with common.fresh_engine(bundle) as engine:
            a = _run_conversation(engine, pair["a"], max_out)
            b_used = _run_conversation(engine, pair["b"], max_out)
        with common.fresh_engine(bundle) as engine:
            b_fresh = _run_conversation(engine, pair["b"], max_out)
        differs = (b_used["replies"], b_used["error"] is None) != (b_fresh["replies"], b_fresh["error"] is None)
        rows.append({"pair": i, "a": a, "b_after_a": b_used, "b_fresh": b_fresh, "differs": differs})
        evidence.append(
            f"pair {i}: A (system {pair['a']['system']!r}, {pair['a']['turns']!r}"
            f"{', max ' + str(pair['a']['max_output_tokens']) + ' tokens' if pair['a']['max_output_tokens'] else ''})"
            f" → {a['replies']!r}"
            f"{' ERROR ' + a['error'] if a['error'] else ''}; B (system {pair['b']['system']!r}, "
            f"{pair['b']['turns']!r}) after A on the same Engine → {b_used['replies']!r}"
            f"{' ERROR ' + b_used['error'] if b_used['error'] else ''}; on a fresh Engine → {b_fresh['replies']!r}"
            f"{' ERROR ' + b_fresh['error'] if b_fresh['error'] else ''}: {'DIFFERS' if differs else 'same'}"
        )

    n_differ = sum(r["differs"] for r in rows)
    fresh_errors = [r for r in rows if r["b_fresh"]["error"]]
    version = common.runtime_info().get("version")
    findings = []
    if n_differ:
        findings.append(
            f"One Engine per conversation: a conversation opened on an Engine that already ran another "
            f"conversation answered differently from the same conversation on a fresh Engine in {n_differ} of "
            f"{len(rows)} pairs (greedy, litert-lm {version}, CPU). Create a new Engine for each conversation."
            + (f" Declared as known runtime behaviour: {known.strip()}" if known else
               " No known runtime behaviour is declared for it in the build config: state leaks between "
               "conversations.")
        )
    else:
        findings.append(
            f"A conversation opened on an Engine that already ran another one answered the same as on a fresh "
            f"Engine in all {len(rows)} pairs (greedy, litert-lm {version}, CPU)."
        )
    if fresh_errors:
        findings.append(
            f"{len(fresh_errors)} conversation(s) failed on a fresh Engine: {fresh_errors[0]['b_fresh']['error']}"
        )
    status = "fail" if fresh_errors or (n_differ and not known) else ("warn" if n_differ else "pass")
    metrics = {
        "pairs_total": len(rows),
        "pairs_differ": n_differ,
        "differs": bool(n_differ),
        "fresh_engine_errors": len(fresh_errors),
        "used_engine_errors": sum(bool(r["b_after_a"]["error"]) for r in rows),
        "difference_declared": bool(known),
        "max_output_tokens": max_out,
        "seconds": round(time.monotonic() - started, 3),
    }
    return common.result(status, metrics, evidence, findings=findings, pairs=rows)
