"""second_turn_parity: the second turn of a conversation against PyTorch, and the stop-token check.

Request:
    {"bundle_path", "model_dir" (the reference), "reference_stop_ids",
     the settings of farm_common/gates/second_turn_parity.py SecondTurnParity: "turns" (two user messages),
     "max_tokens"}

litert-lm: one fresh Engine (CPU), one Conversation, greedy, the two messages sent in turn (a chat
app's second question). PyTorch float32, greedy, stopping at the source's own end-of-sequence ids.

What the runtime computes in turn 2, measured on litert-lm 0.18.1 (tiny Gemma 3, text and image
builds of one source): the first turn's prompt, the reply's ids as generated, the stop token it
sampled (held back, fed at the next prefill), then the text by which the template's render of the
new conversation extends its render of the history (the history render's own close after the stop
token, Gemma's "\n", is never fed). That sequence, with every token's own embedding, is this
gate's reference; the whole history tokenized afresh (what transformers' generate would see) is
measured too (full_history_same), not gated.

On a bundle that takes its prompt as embeddings (an embedder section), litert-lm 0.18.1 gives the
held-back stop token a zero embedding (the seeds' card; measured here: the image build's second
reply is PyTorch's with that one embedding zeroed, the text build's is PyTorch's). The measurement
runs PyTorch that way too and names the defect, with the runtime's version, when it explains the
runtime's reply.

A first reply that runs to max_tokens has no stop token to check: skipped, naming it (choose turns
the model answers briefly). Pass iff reply 1 is PyTorch's and reply 2 is the reference's. Replies
are compared as text with special tokens kept (the runtime writes generated special tokens).
"""

from __future__ import annotations

from typing import Any

from farm_common.gates.second_turn_parity import SecondTurnParity
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS
from farm_toolchain.protocol import BadInput


def _greedy_embeds(model: Any, ids: list[int], zero_at: int | None, max_tokens: int, stop_ids: list[int]) -> list[int]:
    """PyTorch's greedy reply from `ids` with one position's input embedding zeroed (a plain loop
    over forward(inputs_embeds=...): generate() does not take embeddings for every model class)."""
    import torch

    table = model.get_input_embeddings()
    with torch.no_grad():
        embeds = table(torch.tensor([ids]))
        if zero_at is not None:
            embeds[0, zero_at] = 0
        gen: list[int] = []
        for _ in range(max_tokens):
            logits = model(inputs_embeds=embeds, attention_mask=torch.ones(1, embeds.shape[1], dtype=torch.long)).logits
            nxt = int(logits[0, -1].argmax())
            if nxt in stop_ids:
                break
            gen.append(nxt)
            embeds = torch.cat([embeds, table(torch.tensor([[nxt]]))], dim=1)
    return gen


@MEASUREMENTS.register("second_turn_parity")
def measure(request: dict[str, Any]) -> dict[str, Any]:
    bundle = common.require_file(request, "bundle_path", "the .litertlm to run")
    model_dir = common.model_folder(request)
    stop_ids = common.stop_ids_arg(request)
    p = common.settings(request, SecondTurnParity)
    template = common.source_template(model_dir)
    if not template:
        raise BadInput(f"{model_dir} has no chat template: a conversation needs one")
    tokenizer, model = common.load_reference(model_dir, None)
    u1, u2 = p.turns

    replies: list[str] = []
    with common.native_errors() as native, common.fresh_engine(bundle) as engine:
        conv = engine.create_conversation(sampler_config=common.greedy_sampler(), max_output_tokens=p.max_tokens)
        try:
            for u in (u1, u2):
                replies.append(common.message_text(conv.send_message(u)))
        except Exception as exc:  # noqa: BLE001 - a runtime failure is this gate's failed result
            reason = common.first_native_error(native)
            return common.result("fail", {"turns_answered": len(replies)},
                                 [f"{type(exc).__name__}: {str(exc).strip()[:300]}"],
                                 [f"the conversation failed at turn {len(replies) + 1}"
                                  + (f" (runtime: {reason})" if reason else "")])
        finally:
            conv.close()
    r1, r2 = replies

    def render(messages: list[dict[str, Any]], generation: bool) -> str:
        return common.render_template(template, messages, generation_prompt=generation)

    def ids_of(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    user1 = {"role": "user", "content": common.text_parts(u1)}
    ids1 = ids_of(render([user1], True))
    a1 = common.reference_generate(model, ids1, p.max_tokens, stop_ids)
    want1 = decode(a1["ids"])
    same1 = r1 == want1
    evidence = [f"turn 1: runtime {common.short(r1, 80)!r} | PyTorch {common.short(want1, 80)!r} -> "
                f"{'same' if same1 else 'DIFFERENT'} ({a1['stop']})"]
    if a1["stop"] == "cap":
        return common.result("skipped", {"turn1_same": same1, "turn1_capped": True}, evidence,
                             [f"the first reply ran to max_tokens ({p.max_tokens}): no stop token is carried into the "
                              "second turn, so there is nothing to check; choose turns the model answers briefly"])
    history = [user1, {"role": "assistant", "content": common.text_parts(want1)},
               {"role": "user", "content": common.text_parts(u2)}]
    before, full = render(history[:2], False), render(history, True)
    if not full.startswith(before):
        raise BadInput("the template's render of the second turn does not extend the history's: the multi_turn "
                       "gate says why; no second turn to compare")
    stop_at = len(ids1) + len(a1["ids"])
    runtime_seq = ids1 + a1["ids"] + [a1["stop_id"]] + ids_of(full[len(before):])
    want2 = decode(_greedy_embeds(model, runtime_seq, None, p.max_tokens, stop_ids))
    zeroed = decode(_greedy_embeds(model, runtime_seq, stop_at, p.max_tokens, stop_ids))
    whole = decode(common.reference_generate(model, ids_of(full), p.max_tokens, stop_ids)["ids"])
    same2 = r2 == want2
    runtime = common.runtime_info()
    has_embedder = any(s["type"] == "TFLiteModel" and s["items"].get("model_type") == "tf_lite_embedder"
                       for s in common.sections(bundle))
    evidence += [f"turn 2: runtime {common.short(r2, 80)!r} | PyTorch {common.short(want2, 80)!r} -> "
                 f"{'same' if same2 else 'DIFFERENT'}",
                 f"turn 2, PyTorch with the stop token's embedding (history position {stop_at}, id {a1['stop_id']}) "
                 f"zeroed: {common.short(zeroed, 80)!r}",
                 f"turn 2, PyTorch on the whole history tokenized afresh: {common.short(whole, 80)!r}"]
    findings = []
    explained = not same2 and r2 == zeroed and zeroed != want2
    if not same1:
        findings.append("the first reply differs from PyTorch's: the second turn is not comparable")
    elif explained:
        findings.append(f"litert-lm {runtime['version']} gives the previous answer's stop token a zero embedding on "
                        f"this bundle ({'it takes its prompt as embeddings: an embedder section' if has_embedder else 'no embedder section'}): "
                        "the second reply is PyTorch's with that one embedding zeroed, so a second question can get "
                        "another answer than the model gives; ask one question per conversation, or send the "
                        "history in a new conversation")
    elif not same2:
        findings.append("the second reply differs from PyTorch's on the sequence the runtime feeds")
    metrics = {"turn1_same": same1, "turn2_same": same2, "zeroed_stop_explains": explained,
               "full_history_same": r2 == whole, "embedder_section": has_embedder, "turn1_capped": False}
    return common.result("fail" if findings else "pass", metrics, evidence, findings)
