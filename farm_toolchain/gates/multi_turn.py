"""multi_turn: a conversation of three turns on one fresh Engine, each render extending the last.

Request: {"bundle_path", optional "model_dir" (its chat_template.jinja / tokenizer_config.json
          template is compared with the bundle's), optional "chat_template": str (a template to
          run instead of the bundle's, e.g. for a negative control), and the settings of
          farm_common/gates/multi_turn.py MultiTurn with their defaults there: "turns" (user
          messages), "system", "max_output_tokens" (null: from the bundle's capacity)}
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
"""

from __future__ import annotations

import time
from typing import Any

from farm_common.gates.multi_turn import MultiTurn
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput

@MEASUREMENTS.register("multi_turn")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    bundle = common.require_file(request, "bundle_path")
    model_dir = common.model_folder(request, required=False)
    settings = common.settings(request, MultiTurn)
    turns, system = settings.turns, settings.system
    override = request.get("chat_template")
    if override is not None and (not isinstance(override, str) or not override):
        raise BadInput("chat_template must be a non-empty Jinja template string")

    meta = common.llm_metadata(bundle)
    bundle_template = meta.jinja_prompt_template if meta is not None else ""
    template = override or bundle_template
    if not template:
        return common.result(
            "fail", {"turns_total": len(turns), "turns_replied": 0}, ["the bundle's LLM metadata has no chat template"],
            findings=["The bundle carries no chat template, so conversations cannot be rendered."])
    # No max_output_tokens given: from the bundle's capacity.
    max_out = settings.max_output_tokens or max(2, min(32, common.capacity(bundle) // 24))

    history: list[dict[str, Any]] = [{"role": "system", "content": common.text_parts(system)}] if system else []
    evidence: list[str] = []
    rows: list[dict[str, Any]] = []
    with common.fresh_engine(bundle) as engine:
        conv = engine.create_conversation(
            messages=[{"role": "system", "content": system}] if system else None,
            sampler_config=common.greedy_sampler(),
            max_output_tokens=max_out,
            chat_template=override,
        )
        try:
            for k, user_text in enumerate(turns, start=1):
                user = {"role": "user", "content": common.text_parts(user_text)}
                row: dict[str, Any] = {"turn": k, "user": user_text}
                prev = common.render_template(template, history, False) if history else ""
                full = common.render_template(template, history + [user], True)
                row["extends"] = full.startswith(prev)
                row["render"] = full
                ours = full[len(prev):] if row["extends"] else None
                runtime_delta = conv.render_message_to_string({"role": "user", "content": user_text})
                row["runtime_increment"] = runtime_delta
                row["increment_matches_runtime"] = ours is not None and ours == runtime_delta
                with common.native_errors() as native:
                    try:
                        reply = common.message_text(conv.send_message(user_text))
                        row["reply"] = reply
                        row["error"] = None
                    except Exception as exc:  # noqa: BLE001 - a failed turn is the finding
                        reply = None
                        row["reply"] = None
                        row["error"] = f"{type(exc).__name__}: {exc}"
                if reply is None:
                    row["runtime_error"] = common.first_native_error(native)
                try:
                    row["token_count"] = conv.token_count
                except RuntimeError:
                    row["token_count"] = None
                if reply is None:
                    rows.append(row)
                    break
                assistant = {"role": "assistant", "content": common.text_parts(reply)}
                after = common.render_template(template, history + [user, assistant], False)
                row["reply_extends"] = after.startswith(full)
                history += [user, assistant]
                rows.append(row)
                evidence.append(
                    f"turn {k}: render {'extends' if row['extends'] else 'DOES NOT extend'} turn {k - 1}'s"
                    f"{' (runtime increment identical)' if row['increment_matches_runtime'] else ''}; "
                    f"user {user_text!r} → reply {reply!r}; render {common.short(full)!r}"
                )
        finally:
            conv.close()
    for row in rows:
        if row.get("reply") is None:
            evidence.append(
                f"turn {row['turn']}: user {row['user']!r} → ERROR {row['error']}"
                f"{' (runtime: ' + row['runtime_error'] + ')' if row.get('runtime_error') else ''}; render "
                f"{'extends' if row['extends'] else 'DOES NOT extend'} the previous one; "
                f"previous {(common.render_template(template, history, False) if history else '')!r}; new {common.short(row['render'])!r}"
            )

    replied = sum(r.get("reply") is not None for r in rows)
    extends = sum(bool(r.get("extends")) for r in rows)
    source_tpl = common.source_template(model_dir)
    findings: list[str] = []
    ok = replied == len(turns) and extends == len(turns)
    if ok:
        findings.append(
            f"A {len(turns)}-turn conversation completes on the CPU through create_conversation/send_message "
            f"(litert-lm {common.runtime_info().get('version')}), and each turn's chat-template render "
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
    return common.result("pass" if ok else "fail", metrics, evidence, findings=findings, turns=rows)
