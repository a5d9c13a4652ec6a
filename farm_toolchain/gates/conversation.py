"""Conversation gates: gate_multi_turn and gate_state_isolation.

gate_multi_turn
    Request: {"bundle_path", optional "model_dir" (its chat_template.jinja / tokenizer_config.json
              template is compared with the bundle's), optional "turns": [3+ user messages],
              optional "system": str, optional "max_output_tokens": int, optional "chat_template":
              str (a template to run instead of the bundle's, e.g. for a negative control)}
    A three-turn conversation on one fresh Engine: `create_conversation()` + `send_message` per turn
    (greedy). Per turn k it checks (1) the turn got a reply without error, (2) the chat template's
    render of the conversation with the new user message (add_generation_prompt=True) extends, as a
    string prefix, the render of the history before it (add_generation_prompt=False, the previous
    replies included) — LiteRT-LM renders conversations incrementally and fails the turn otherwise
    ("The new rendered template string does not start with the previous rendered template string",
    measured on litert-lm 0.18.1) — and (3, reported, not required) that the history render with the
    reply starts with what was prefilled for it. Renders use the content-part form the runtime gives
    the template ({"type": "text", "text": …}); the runtime's own increment
    (`Conversation.render_message_to_string`, which answers '' when the template does not extend) is
    compared with the one computed here with transformers' Jinja renderer.
    Status "pass" iff every turn replied and every render extends the previous one.

gate_state_isolation
    Request: {"bundle_path", optional "model_dir" (unused), optional "pairs": [{"a": conv, "b": conv}]
              with conv = {"system": str | null, "turns": [user messages], optional
              "max_output_tokens"} (default: 7 pairs, below), optional
              "max_output_tokens": int, optional "fail_on_difference": bool (default false)}
    One Engine per conversation: for each pair, conversation A then conversation B on one Engine
    against B alone on a fresh Engine (greedy). A difference is a property of the runtime (litert-lm
    reuses the prompt tokens a new conversation shares with the previous one and does not reset
    recurrent state), not a defect of the file: status stays "pass" with metrics "differs" and a
    finding for the model card, unless fail_on_difference is set. A conversation that fails on a
    fresh Engine is a failure of the file (status "fail").
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from farm_toolchain.gates import _runtime
from farm_toolchain.protocol import BadInput

# Short, so that three turns fit the 64-token cache of the tiny test models.
DEFAULT_TURNS = ["Hi!", "What is 2 + 3?", "Thanks!"]
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


def _parts(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


def _render(template: str, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[messages], chat_template=template, add_generation_prompt=generation_prompt
    )
    return rendered[0]


def _capacity(bundle: Path) -> int:
    meta = _runtime.llm_metadata(bundle)
    if meta is not None and meta.max_num_tokens:
        return int(meta.max_num_tokens)
    plan = _runtime.prefill_plan(bundle)
    return int(plan["cache_length"] or 1024)


def _max_output_tokens(request: dict[str, Any], capacity: int, per: int) -> int:
    # Small caches (the tiny test models have 64 tokens) fit three short turns only with short replies.
    return _runtime.optional_int(request, "max_output_tokens", max(2, min(32, capacity // per)))


def _source_template(model_dir: Path | None) -> str | None:
    if model_dir is None:
        return None
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    cfg = model_dir / "tokenizer_config.json"
    if cfg.is_file():
        tpl = json.loads(cfg.read_text(encoding="utf-8")).get("chat_template")
        return tpl if isinstance(tpl, str) else None
    return None


def _optional_dir(request: dict[str, Any], key: str) -> Path | None:
    return _runtime.require_dir(request, key) if request.get(key) is not None else None


def _short(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[: limit // 2] + " … " + text[-limit // 2 :]


# --- gate_multi_turn ------------------------------------------------------------------------------


def handle_multi_turn(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    bundle = _runtime.require_file(request, "bundle_path")
    model_dir = _optional_dir(request, "model_dir")
    turns = request.get("turns", DEFAULT_TURNS)
    if not isinstance(turns, list) or len(turns) < 2 or not all(isinstance(t, str) and t for t in turns):
        raise BadInput("turns must be a list of at least 2 non-empty user messages")
    system = request.get("system")
    if system is not None and (not isinstance(system, str) or not system):
        raise BadInput("system must be a non-empty string or null")
    override = request.get("chat_template")
    if override is not None and (not isinstance(override, str) or not override):
        raise BadInput("chat_template must be a non-empty Jinja template string")

    meta = _runtime.llm_metadata(bundle)
    bundle_template = meta.jinja_prompt_template if meta is not None else ""
    template = override or bundle_template
    if not template:
        return _runtime.result(
            "fail", {"turns_total": len(turns), "turns_replied": 0}, ["the bundle's LLM metadata has no chat template"],
            findings=["The bundle carries no chat template, so conversations cannot be rendered."])
    capacity = _capacity(bundle)
    max_out = _max_output_tokens(request, capacity, 24)

    history: list[dict[str, Any]] = [{"role": "system", "content": _parts(system)}] if system else []
    evidence: list[str] = []
    rows: list[dict[str, Any]] = []
    with _runtime.fresh_engine(bundle) as engine:
        conv = engine.create_conversation(
            messages=[{"role": "system", "content": system}] if system else None,
            sampler_config=_runtime.greedy_sampler(),
            max_output_tokens=max_out,
            chat_template=override,
        )
        try:
            for k, user_text in enumerate(turns, start=1):
                user = {"role": "user", "content": _parts(user_text)}
                row: dict[str, Any] = {"turn": k, "user": user_text}
                prev = _render(template, history, False) if history else ""
                full = _render(template, history + [user], True)
                row["extends"] = full.startswith(prev)
                row["render"] = full
                ours = full[len(prev):] if row["extends"] else None
                runtime_delta = conv.render_message_to_string({"role": "user", "content": user_text})
                row["runtime_increment"] = runtime_delta
                row["increment_matches_runtime"] = ours is not None and ours == runtime_delta
                with _runtime.native_errors() as native:
                    try:
                        reply = _runtime.message_text(conv.send_message(user_text))
                        row["reply"] = reply
                        row["error"] = None
                    except Exception as exc:  # noqa: BLE001 - a failed turn is the finding
                        reply = None
                        row["reply"] = None
                        row["error"] = f"{type(exc).__name__}: {exc}"
                if reply is None:
                    row["runtime_error"] = _runtime.first_native_error(native)
                try:
                    row["token_count"] = conv.token_count
                except RuntimeError:
                    row["token_count"] = None
                if reply is None:
                    rows.append(row)
                    break
                assistant = {"role": "assistant", "content": _parts(reply)}
                after = _render(template, history + [user, assistant], False)
                row["reply_extends"] = after.startswith(full)
                history += [user, assistant]
                rows.append(row)
                evidence.append(
                    f"turn {k}: render {'extends' if row['extends'] else 'DOES NOT extend'} turn {k - 1}'s"
                    f"{' (runtime increment identical)' if row['increment_matches_runtime'] else ''}; "
                    f"user {user_text!r} → reply {reply!r}; render {_short(full)!r}"
                )
        finally:
            conv.close()
    for row in rows:
        if row.get("reply") is None:
            evidence.append(
                f"turn {row['turn']}: user {row['user']!r} → ERROR {row['error']}"
                f"{' (runtime: ' + row['runtime_error'] + ')' if row.get('runtime_error') else ''}; render "
                f"{'extends' if row['extends'] else 'DOES NOT extend'} the previous one; "
                f"previous {(_render(template, history, False) if history else '')!r}; new {_short(row['render'])!r}"
            )

    replied = sum(r.get("reply") is not None for r in rows)
    extends = sum(bool(r.get("extends")) for r in rows)
    source_tpl = _source_template(model_dir)
    findings: list[str] = []
    ok = replied == len(turns) and extends == len(turns)
    if ok:
        findings.append(
            f"A {len(turns)}-turn conversation completes on the CPU through create_conversation/send_message "
            f"(litert-lm {_runtime.runtime_info().get('version')}), and each turn's chat-template render "
            f"extends the previous one."
        )
    else:
        not_ext = [r["turn"] for r in rows if not r.get("extends")]
        failed = [r["turn"] for r in rows if r.get("reply") is None]
        findings.append(
            f"Multi-turn conversation breaks: {replied} of {len(turns)} turns replied"
            + (f"; the chat template's render at turn(s) {not_ext} does not extend the previous turn's render, "
               f"which LiteRT-LM's incremental rendering requires" if not_ext else "")
            + (f"; turn(s) {failed} failed in the runtime" if failed else "") + "."
        )
    metrics = {
        "turns_total": len(turns),
        "turns_replied": replied,
        "renders_extend": extends,
        "increments_match_runtime": sum(bool(r.get("increment_matches_runtime")) for r in rows),
        "replies_extend_prefill": sum(bool(r.get("reply_extends")) for r in rows),
        "max_output_tokens": max_out,
        "template_overridden": override is not None,
        "template_matches_source": (source_tpl == bundle_template) if source_tpl is not None else None,
        "seconds": round(time.monotonic() - started, 3),
    }
    return _runtime.result("pass" if ok else "fail", metrics, evidence, findings=findings, turns=rows)


# --- gate_state_isolation -----------------------------------------------------------------------


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
        sampler_config=_runtime.greedy_sampler(),
        max_output_tokens=spec.get("max_output_tokens") or max_out,
    )
    replies: list[str] = []
    try:
        with _runtime.native_errors() as native:
            try:
                for turn in spec["turns"]:
                    replies.append(_runtime.message_text(conv.send_message(turn)))
                error = None
            except Exception as exc:  # noqa: BLE001 - recorded, compared
                error = f"{type(exc).__name__}: {exc}"
        if error is not None:
            reason = _runtime.first_native_error(native)
            return {"replies": replies, "error": error + (f" (runtime: {reason})" if reason else ""),
                    "token_count": None}
        return {"replies": replies, "error": None, "token_count": conv.token_count}
    finally:
        conv.close()


def handle_state_isolation(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    bundle = _runtime.require_file(request, "bundle_path")
    _optional_dir(request, "model_dir")  # accepted for a uniform request; not needed
    fail_on_difference = _runtime.optional_bool(request, "fail_on_difference", False)
    raw_pairs = request.get("pairs", DEFAULT_PAIRS)
    if not isinstance(raw_pairs, list) or not raw_pairs:
        raise BadInput("pairs must be a non-empty list of {a, b} conversations")
    pairs = [
        {"a": _conv_spec(p.get("a") if isinstance(p, dict) else None, f"pairs[{i}].a"),
         "b": _conv_spec(p.get("b") if isinstance(p, dict) else None, f"pairs[{i}].b")}
        for i, p in enumerate(raw_pairs)
    ]
    max_out = _max_output_tokens(request, _capacity(bundle), 16)

    rows = []
    evidence = []
    for i, pair in enumerate(pairs):
        with _runtime.fresh_engine(bundle) as engine:
            a = _run_conversation(engine, pair["a"], max_out)
            b_used = _run_conversation(engine, pair["b"], max_out)
        with _runtime.fresh_engine(bundle) as engine:
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
    version = _runtime.runtime_info().get("version")
    findings = []
    if n_differ:
        findings.append(
            f"One Engine per conversation: a conversation opened on an Engine that already ran another "
            f"conversation answered differently from the same conversation on a fresh Engine in {n_differ} of "
            f"{len(rows)} pairs (greedy, litert-lm {version}, CPU). Create a new Engine for each conversation."
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
    status = "fail" if fresh_errors or (fail_on_difference and n_differ) else "pass"
    metrics = {
        "pairs_total": len(rows),
        "pairs_differ": n_differ,
        "differs": bool(n_differ),
        "fresh_engine_errors": len(fresh_errors),
        "used_engine_errors": sum(bool(r["b_after_a"]["error"]) for r in rows),
        "fail_on_difference": fail_on_difference,
        "max_output_tokens": max_out,
        "seconds": round(time.monotonic() - started, 3),
    }
    return _runtime.result(status, metrics, evidence, findings=findings, pairs=rows)
