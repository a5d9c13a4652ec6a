"""Model cards from a crafted lineage (SQLite): provenance and carry-over, the Changes section, the
edge-compat schema, a golden CARD.md, and every mechanical check failing on a crafted violation next
to its passing case. The real tiny-model builds are in test_cards_build.py (slow)."""

from __future__ import annotations

import json
import re

import pytest

from farm.cards.checks import CARD_CHECKS
from farm.cards.facts import model_facts
from farm.cards.model import validate
from farm.cards.publish import compose
from farm.errors import BadInput, CardRefused
from farm.lineage.db import Database
from farm.lineage.record import record_recheck, record_recipe
from farmtest import DATA
from farmtest.cards import DEVICES, WARN, Lineage, h, honest

GOLDEN = DATA / "cards" / "tiny-qwen35.CARD.md"


def _row(facts, gate):
    return next(g for g in facts["variants"][0]["gates"] if g["gate"] == gate)


# --- provenance and carry-over --------------------------------------------------------------------


def test_rows_name_the_file_they_were_measured_on_and_carry_over_only_identical_sections(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    b = lin.file("b", "q1", tok="tok2")  # tokenizer-only change
    lin.gate(b, "tokenizer_parity")
    facts = lin.facts()
    assert [v["lineage"]["sha256"] for v in facts["variants"]] == [b]
    tok = _row(facts, "tokenizer_parity")
    assert (tok["measured_on"], tok["basis"], tok["stale"]) == (b, "this file", False)
    # logits parity depends on the TFLite section only: carried over from a, which b carries byte for byte.
    logits = _row(facts, "logits_parity")
    assert (logits["measured_on"], logits["basis"], logits["stale"]) == (a, "identical sections", False)
    # generation parity depends on the tokenizer too: stale, naming what changed.
    gen = _row(facts, "generation_parity")
    assert (gen["measured_on"], gen["stale"], gen["changed"]) == (a, True, ["HF_Tokenizer_Zlib"])
    dev = facts["variants"][0]["devices"][0]
    assert (dev["measured_on"], dev["basis"], dev["stale"]) == (a, "identical sections", False)

    card, md, failures = compose(facts, {}, DEVICES)
    assert failures == []
    assert f"whose TFLite section this file carries byte for byte" in md
    assert f"STALE (tokenizer section changed)" in md
    # The carried device run is in the card, citing the file it ran on.
    (rec,) = card["device"]["records"]
    assert rec["run"]["runs"] is True and rec["source"].endswith(f"measured on {a}")
    assert card["benchmarks"][0]["notes"].startswith(f"file {a[:12]} (this file carries its TFLiteModel")

    c = lin.file("c", "q2", tok="tok2")  # a recipe change: the TFLite section changes
    facts = lin.facts()
    assert facts["variants"][0]["lineage"]["sha256"] == c
    assert facts["variants"][0]["devices"][0]["stale"] is True
    card, md, _ = compose(facts, {}, DEVICES)
    assert "device" not in card and card["benchmarks"] == []
    assert "Backends benchmarked: none measured yet" in md


def test_changes_name_the_replaced_section_with_both_files(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    b = lin.file("b", "q1", tok="tok2")
    _card, md, _ = lin.compose()
    changes = md.split("## Changes", 1)[1].split("\n## ", 1)[0]
    assert f"`{a[:12]}` (1,001 B, 2026-10-12) → `{b[:12]}` (1,002 B, 2026-10-13)" in changes
    assert "tokenizer section replaced; LLM metadata, TFLite section byte-identical" in changes


def test_unknown_model_is_bad_input(tmp_path):
    lin = Lineage(tmp_path)
    lin.file("a", "q1")
    with pytest.raises(BadInput, match="no farm-built bundle of a model named 'nope'"):
        model_facts(lin.res, "nope")
    assert model_facts(lin.res, "TINY")["model"] == "tiny"  # the config name, lower-cased


# --- card.json: edge-compat's schema and the farm's rules --------------------------------------------


def test_card_validates_and_an_extra_field_or_zero_throughput_is_refused(tmp_path):
    lin = Lineage(tmp_path)
    honest(lin)
    card, _md, _ = lin.compose()
    assert card["schema_version"] == "1.2" and card["model"]["id"] == "tiny"
    assert "TODO" not in json.dumps(card)
    assert card["conversion"]["command"] == "farm build examples/tiny.yaml --recipe r"
    assert "litert-torch 0.10.0" in card["conversion"]["tool_version"]
    assert card["model"]["license"].startswith("none: a generated test model")
    validate(card)
    extra = json.loads(json.dumps(card))
    extra["model"]["nickname"] = "x"
    with pytest.raises(CardRefused, match="nickname"):
        validate(extra)
    zero = json.loads(json.dumps(card))
    zero["benchmarks"][0]["tokens_per_s"] = 0.0
    with pytest.raises(CardRefused, match="zero throughput"):
        validate(zero)
    zero_run = json.loads(json.dumps(card))
    zero_run["device"]["records"][0]["run"]["decode_tokens_per_s"] = 0.0
    with pytest.raises(CardRefused) as err:
        validate(zero_run)
    assert "decode_tokens_per_s = 0.0" in str(err.value)


def test_a_failed_run_is_a_record_without_figures(tmp_path):
    lin = Lineage(tmp_path)
    a = lin.file("a", "q1")
    lin.device(a, "pixel-8", "failed", failure_class="engine_create_failed", evidence=["engine create failed"],
               decode_tokens_per_s=0.0)
    card, md, failures = lin.compose()
    (rec,) = card["device"]["records"]
    assert rec["run"]["runs"] is False and rec["run"]["loads"] is False
    assert rec["run"]["decode_tokens_per_s"] is None and rec["run"]["failure_class"] == "engine_create_failed"
    assert card["benchmarks"] == [] and failures == []


# --- golden CARD.md --------------------------------------------------------------------------------


def _normalised(md: str) -> str:
    md = re.sub(r"\b[0-9a-f]{64}\b", "<sha256>", md)
    md = re.sub(r"\b[0-9a-f]{12}\b", "<sha12>", md)
    return re.sub(r"\b20\d\d-\d\d-\d\d\b", "<date>", md)


def test_golden_card_markdown(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    b = lin.file("b", "q1", tok="tok2")
    lin.gate(b, "tokenizer_parity")
    lin.gate(b, "chat_template", findings=["3 of 3 conversations render byte-identical"])
    _card, md, failures = lin.compose()
    assert failures == []
    got = _normalised(md)
    if not GOLDEN.exists():  # first run writes it; review and commit it
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), f"CARD.md differs from {GOLDEN} (delete it to regenerate, then review)"


# --- mechanical checks: each fails on a crafted violation and passes when it holds -------------------


def _failures(check: str, card, facts, md, devices=DEVICES):
    return CARD_CHECKS.get(check).check(card, facts, md, devices)


def test_every_check_is_tested_here():
    import inspect

    source = inspect.getsource(inspect.getmodule(test_every_check_is_tested_here))
    assert all(f'"{name}"' in source for name in CARD_CHECKS.names()), "a check without a negative control here"


def test_check_verified_device_needs_a_run_of_this_files_tflite_section(tmp_path):
    lin = Lineage(tmp_path)
    honest(lin)
    old_card, old_md, _ = lin.compose()
    assert _failures("verified_devices_ran_this_file", old_card, lin.facts(), old_md) == []
    # The seed's apology: a card kept quoting a device run after the file changed. The new file's
    # TFLite section differs; the old card's "verified" row no longer has a measurement behind it.
    lin.file("b", "q2")
    fails = _failures("verified_devices_ran_this_file", old_card, lin.facts(), old_md)
    assert len(fails) == 1 and "does not carry" in fails[0] and "local-cpu" in fails[0]
    # A record citing a run that is not recorded at all.
    forged = json.loads(json.dumps(old_card))
    forged["device"]["records"][0]["source"] = "lineage device_results #999: measured on " + "0" * 64
    assert "cites no recorded device run" in _failures("verified_devices_ran_this_file", forged, lin.facts(), old_md)[0]


def test_check_verified_device_is_never_one_the_file_does_not_fit(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    card, md, _ = lin.compose()
    lin.device(a, "local-cpu", "does_not_fit", failure_class="does_not_fit",
               env={"estimated_need_mb": 20000, "basis": "float export peak per parameter"})
    fails = _failures("verified_devices_ran_this_file", card, lin.facts(), md)
    assert any("not to fit" in f for f in fails)


def test_check_warn_findings_are_in_honest_notes_and_pitfalls(tmp_path):
    lin = Lineage(tmp_path)
    honest(lin)
    card, md, _ = lin.compose()
    facts = lin.facts()
    assert WARN in card["pitfalls"] and WARN in md.split("## Honest notes")[1]
    assert _failures("warn_findings_are_printed", card, facts, md) == []
    late = md.replace(WARN, "(added two months later)")
    assert "not in the card's Honest notes" in _failures("warn_findings_are_printed", card, facts, late)[0]
    card2 = {**card, "pitfalls": []}
    assert "not in the card's pitfalls" in _failures("warn_findings_are_printed", card2, facts, md)[0]


def test_check_metadata_fixes_are_printed(tmp_path):
    lin = Lineage(tmp_path)
    fix = "stop token(s) ids [201] ('\\n') dropped: a stop token that is only whitespace ends every reply"
    a = lin.file("a", "q1", fixes=[fix])
    for g in ("tokenizer_parity", "logits_parity", "generation_parity", "metadata", "arithmetic"):
        lin.gate(a, g)
    card, md, _ = lin.compose()
    facts = lin.facts()
    assert f"the farm fixed its metadata when packaging it: {fix}." in md.split("## Honest notes")[1]
    assert _failures("metadata_fixes_are_printed", card, facts, md) == []
    # Negative control: the note removed from the rendered card.
    hidden = md.replace(fix, "(said nowhere)")
    assert "is not in the card's Honest notes" in _failures("metadata_fixes_are_printed", card, facts, hidden)[0]


def test_check_real_model_needs_an_arithmetic_result(tmp_path):
    lin = Lineage(tmp_path, source_kind="hf")
    a = honest(lin, arithmetic=False)
    card, md, failures = lin.compose({"license": "apache-2.0"})
    assert any(f.startswith("real_models_have_an_arithmetic_result") for f in failures)
    lin.gate(a, "arithmetic")
    card, md, failures = lin.compose({"license": "apache-2.0"})
    assert failures == []
    assert card["model"]["source_url"] == "https://huggingface.co/Org/tiny/tree/abc123"
    # An arithmetic result on a file with another TFLite section does not count for this one.
    lin.file("b", "q2")
    assert _failures("real_models_have_an_arithmetic_result", card, lin.facts(), md)


def test_check_device_limits_match_measured_peak_memory(tmp_path):
    lin = Lineage(tmp_path)
    honest(lin)
    card, md, _ = lin.compose()
    facts = lin.facts()
    assert "peaked at 300 MB of 16000 MB RAM" in md
    assert _failures("device_limits_match_measurements", card, facts, md) == []
    wrong = md.replace("peaked at 300 MB of 16000 MB RAM", "peaked at 250 MB of 16000 MB RAM")
    fails = _failures("device_limits_match_measurements", card, facts, wrong)
    assert any("matches no measured run" in f for f in fails) and any("does not state" in f for f in fails)


def test_check_pending_or_failed_recheck_must_be_said(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    trigger = lin.gate(a, "generation_parity", "fail")
    with lin.db.session() as s:
        rc = record_recheck(s, trigger_result_id=trigger, recipe_digest=lin.recipe, basis="recipe", kind="parity",
                            siblings=[h("sibling")])
    card, md, failures = lin.compose()
    assert f"Re-check #{rc}" in md and "some still pending" in md
    assert _failures("rechecks_are_settled_or_said", card, lin.facts(), md) == []
    silent = md.replace(f"Re-check #{rc}", "A re-check")
    assert "pending and the card does not say so" in _failures("rechecks_are_settled_or_said", card, lin.facts(), silent)[0]


def test_check_no_placeholder_or_empty_cell(tmp_path):
    lin = Lineage(tmp_path)
    honest(lin)
    card, md, _ = lin.compose()
    assert _failures("no_placeholders_or_empty_cells", card, lin.facts(), md) == []
    assert "placeholder 'TODO'" in _failures("no_placeholders_or_empty_cells", card, lin.facts(), md + "\nTODO: numbers\n")[0]
    todo_card = json.loads(json.dumps(card))
    todo_card["conversion"]["command"] = "TODO"  # seed 004's conversion block
    assert _failures("no_placeholders_or_empty_cells", todo_card, lin.facts(), md)
    assert "empty table cell" in _failures("no_placeholders_or_empty_cells", card, lin.facts(), md + "\n| a |  | c |\n")[0]


def test_publish_stores_and_records_the_card_on_postgresql(tmp_path, pg_url):
    """The card, its CARD.md and chart stored and recorded (kind card, its bundles as inputs) on the
    real PostgreSQL, whose column lengths SQLite does not enforce; the same card twice is one object."""
    from farm.cards.publish import render_card

    db = Database(pg_url)
    with db.engine.begin() as c:
        for table in ("tune_searches", "leases", "artifact_locations", "device_results", "gate_results", "rechecks", "stage_cache",
                      "sections", "artifact_inputs", "artifacts", "recipes", "sources", "toolchains"):
            c.exec_driver_sql(f"DELETE FROM {table}")
    db.engine.dispose()
    lin = Lineage(tmp_path, url=pg_url)
    a = honest(lin)
    out = render_card(lin.res, "tiny", {}, out_dir=tmp_path / "out", publish=True, devices=DEVICES)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["CARD.md", "card.json", "chart.png"]
    again = render_card(lin.res, "tiny", {}, publish=True, devices=DEVICES)
    assert again["card_sha256"] == out["card_sha256"]
    from farm.lineage.queries.artifacts import lineage
    from farm.lineage.queries.cards import latest_card

    with lin.db.session() as s:
        rec = lineage(s, out["card_sha256"])
        assert rec["kind"] == "card" and rec["details"]["describes"] == [a]
        assert latest_card(s, "tiny")["sha256"] == out["card_sha256"]


def test_a_file_without_a_recorded_command_says_so(tmp_path):
    """Files built before the farm recorded build commands: the card says it was not recorded, it
    never composes a command line nobody ran."""
    lin = Lineage(tmp_path)
    lin.file("a", "q1", command=None)
    card, _md, _ = lin.compose()
    assert card["conversion"]["command"] == "not recorded (built before the farm recorded build commands)"


def test_check_quality_figures_come_from_a_recorded_task_accuracy_result(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    metrics = {"questions": 68, "float_right": 49, "float_accuracy": 49 / 68, "bundle_right": 47,
               "bundle_accuracy": 47 / 68, "kept": 42, "lost": 7, "gained": 5, "max_lost": 9}
    lin.gate(a, "task_accuracy", metrics=metrics)
    card, md, failures = lin.compose()
    assert "| `tiny_r.litertlm` | 49/68 (72 %) | 47/68 (69 %) | 42 of 49 | 7 (allowed 9) | 5 |" in md
    # The table is the gate's own (farm_common/gates/task_accuracy.py CARD_TABLE): its lead-in and columns.
    assert "| File | Float model | This file | Kept | Lost | Gained | Status | Measured on |\n|---|---|---|---|---|---|---|---|" in md
    assert "The shipped everyday question set (farm_toolchain/data/task_questions.json)" in md
    assert _failures("quality_figures_are_measured", card, lin.facts(), md) == []
    better = md.replace("| 7 (allowed 9) |", "| 2 (allowed 9) |")
    assert "matches no task_accuracy result" in _failures("quality_figures_are_measured", card, lin.facts(), better)[0]
    # A score measured on bytes the current file does not carry is not this file's score.
    lin.file("b", "q2")
    fails = _failures("quality_figures_are_measured", card, lin.facts(), md)
    assert fails and "matches no task_accuracy result" in fails[0]


def test_a_target_no_recipe_met_is_on_the_card_with_its_frontier():
    from farm.cards.render import recipe_search

    search = {"id": 7, "finished_at": "2026-12-04T16:00:00", "float_sha256": h("float"), "status": "not_met",
              "target": {"max_kl": 0.05, "min_top1": 0.85, "max_bytes_per_param": 0.85},
              "reason": "at ≤ 0.85 bytes/param the least predicted KL is 0.41 (lm_head at int4)",
              "frontier": [{"kind": "uniform", "name": "int8_wo", "bytes_per_param": 1.0, "kl": 0.0058, "top1": 0.94}]}
    md = "\n".join(recipe_search({"variants": [], "unmet_searches": [search]}))
    assert "## Targets no recipe met" in md and "search #7" in md and h("float")[:12] in md
    assert "least predicted KL is 0.41" in md and "int8_wo 1.000 B/param" in md and "frontier.png" not in md
    # Negative control: no unmet search, no section.
    assert "Targets no recipe met" not in "\n".join(recipe_search({"variants": [], "unmet_searches": []}))


def test_an_unchanged_card_is_not_drawn_again_unless_a_file_of_it_is_missing(tmp_path, monkeypatch):
    from farm.cards import publish
    from farm.cards.publish import render_card

    lin = Lineage(tmp_path)
    honest(lin)
    first = render_card(lin.res, "tiny", {}, publish=True, devices=DEVICES)
    assert first["new"]

    def no_drawing(*_a, **_k):
        raise AssertionError("the chart was drawn again")

    monkeypatch.setattr(publish, "chart_png", no_drawing)
    again = render_card(lin.res, "tiny", {}, publish=True, devices=DEVICES)
    assert again["new"] is False and again["card_sha256"] == first["card_sha256"]
    assert again["uris"] == first["uris"]
    # negative control: the stored chart gone, the card is published again (drawn, stored)
    lin.res.store.delete(first["uris"]["chart.png"].rsplit("/", 1)[1])  # the uri ends in the sha256
    with pytest.raises(AssertionError, match="drawn again"):
        render_card(lin.res, "tiny", {}, publish=True, devices=DEVICES)


# --- runtime compatibility and Changes (issue 20) --------------------------------------------------


def _runtime_section(md: str) -> str:
    return md.split("## Runtime compatibility", 1)[1].split("\n## ", 1)[0]


def test_a_release_is_a_row_only_with_results_and_requires_only_over_a_measured_failure(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    _card, md, failures = lin.compose()
    assert failures == []
    table = _runtime_section(md)
    assert "| `tiny_r.litertlm` | 0.18.1 | warn | 6 | — | build |" in table
    assert "0.17.1" not in table and "Requires" not in table  # nothing older measured: no floor claimed
    # Re-validation on an older release that fails, and a newer one that works.
    lin.gate(a, "generation_parity", "fail", ["differs at token 3"], runtime_version="0.17.1", toolchain_id=None)
    lin.gate(a, "generation_parity", "pass", runtime_version="0.19.0", toolchain_id=None)
    _card, md, failures = lin.compose()
    assert failures == []
    table = _runtime_section(md)
    assert "| `tiny_r.litertlm` | 0.17.1 | fail | 1 | generation_parity | re-validation |" in table
    assert "| `tiny_r.litertlm` | 0.19.0 | pass | 1 | — | re-validation |" in table
    assert ("checked on litert-lm 0.17.1, 0.18.1, 0.19.0 (oldest 0.17.1); works on 0.18.1, 0.19.0; fails on 0.17.1; "
            "the verdict changed at 0.18.1 (fail on 0.17.1 → warn). Requires litert-lm ≥ 0.18.1.") in table
    # A regression on the newest release: no floor, the change named.
    lin.gate(a, "logits_parity", "fail", ["top-1 agreement 0.41"], runtime_version="0.20.0", toolchain_id=None)
    _card, md, _ = lin.compose()
    table = _runtime_section(md)
    assert "Requires" not in table and "the verdict changed at 0.20.0 (pass on 0.19.0 → fail)" in table


def test_check_runtime_rows_are_measured(tmp_path):
    lin = Lineage(tmp_path)
    honest(lin)
    card, md, _ = lin.compose()
    facts = lin.facts()
    assert _failures("runtime_rows_are_measured", card, facts, md) == []
    row = "| `tiny_r.litertlm` | 0.18.1 | warn | 6 | — | build |"
    invented = md.replace(row, row + " 2026-10-12 |\n| `tiny_r.litertlm` | 0.16.0 | pass | 6 | — | build | 2026-10-12 |", 1)
    assert "no gate result on its bytes was measured with that release" in " ".join(
        _failures("runtime_rows_are_measured", card, facts, invented))
    assert "printed pass" in " ".join(_failures("runtime_rows_are_measured", card, facts, md.replace(
        "| 0.18.1 | warn |", "| 0.18.1 | pass |")))
    floor = md.replace("works on 0.18.1.", "works on 0.18.1. Requires litert-lm ≥ 0.18.1.")
    assert "without an older release measured failing" in " ".join(
        _failures("runtime_rows_are_measured", card, facts, floor))
    dropped = md.replace(row, "")
    assert "leaves out" in " ".join(_failures("runtime_rows_are_measured", card, facts, dropped))


def test_changes_name_a_changed_tokenizer_and_recipe_as_inputs(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    b = lin.file("b", "q1", tok="tok2")
    with lin.db.session() as s:
        other = record_recipe(s, h("recipe2"), "r2", {"name": "r2", "description": "int4"}, [])
    lin.recipe = other
    c = lin.file("c", "q2", tok="tok2")
    _card, md, _ = lin.compose()
    changes = md.split("## Changes", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in changes.splitlines() if ln.startswith("- ")]
    assert len(lines) == 3 and lines[2].endswith("the first file of this variant.")
    assert f"`{b[:12]}`" in lines[0] and f"`{c[:12]}`" in lines[0]
    assert "TFLite section replaced" in lines[0] and "tokenizer section" not in lines[0].split("Inputs")[0].split(
        "replaced")[0]
    assert f"Inputs changed: recipe r `{h('recipe')[:12]}` → r2 `{h('recipe2')[:12]}`." in lines[0]
    assert lines[1].startswith("- 2026-10-13: `tiny_r.litertlm` ") and "tokenizer section replaced" in lines[1]
    assert f"Inputs changed: tokenizer `{h('tokenizer-tok')[:12]}` → `{h('tokenizer-tok2')[:12]}`." in lines[1]
    assert f"`{a[:12]}`" in lines[1]


def test_check_image_contract_is_stated():
    from farm.cards.render import image_input

    finding = "litert-lm 0.18.1 gives the previous answer's stop token a zero embedding on this bundle"
    image = {"height": 64, "width": 64, "patches": 64, "soft_tokens": 16, "positions_per_image": 17,
             "images_per_turn": 1, "mean": [0.5] * 3, "std": [0.5] * 3, "normalize_in_graph": True}
    gate = {"gate": "second_turn_parity", "stale": False, "status": "fail", "findings": [finding],
            "metrics": {}, "basis": "this file", "measured_on_created": "2026-12-06T00:00:00",
            "runtime_version": "0.18.1"}
    facts = {"variants": [{"lineage": {"sha256": "a" * 64, "name": "x.litertlm", "sections": [],
                                       "details": {"image": image, "vision_recipe": "float32"},
                                       "recipe": {"name": "float32"}},
                           "gates": [gate], "text_twin": None}]}
    md = "\n".join(["# card", *image_input(facts), "", "## Usage", ""])
    assert "resized (stretched) to 64x64" in md and finding in md
    assert _failures("image_contract_is_stated", {}, facts, md) == []
    # Negative controls: the section missing, and the pitfall left out of it.
    assert len(_failures("image_contract_is_stated", {}, facts, "# card\n## Usage\n")) == 3
    assert "not in the card's Image input section" in _failures(
        "image_contract_is_stated", {}, facts, md.replace(finding, "(said nowhere)"))[0]
    # A text bundle's card has nothing to state.
    text = {"variants": [{**facts["variants"][0], "lineage": {**facts["variants"][0]["lineage"], "details": {}}}]}
    assert _failures("image_contract_is_stated", {}, text, "# card") == []


def test_an_image_bundles_measured_pitfalls_reach_card_json():
    """The pitfalls a gate declares (farm_common/gates/<gate>.py `card_pitfall`) from its current
    results: farm/cards/ names no gate."""
    from farm.cards.model import gate_pitfalls

    finding = "litert-lm 0.18.1 gives the previous answer's stop token a zero embedding on this bundle"
    gates = [{"gate": "second_turn_parity", "stale": False, "status": "fail", "findings": [finding], "metrics": {}},
             {"gate": "image_turn_parity", "stale": False, "status": "pass", "findings": [],
              "metrics": {"images": 3, "own_path_exact": 1}, "runtime_version": "0.18.1"}]
    image = {"variants": [{"lineage": {"details": {"image": {"height": 64}}}, "gates": gates}]}
    got = gate_pitfalls(image)
    assert got[0] == finding and "1 of 3 image turns equal that path" in got[1]
    # Negative controls: a stale result; a second turn that passed and image turns all on the model's
    # own path; a gate that declares no pitfall (its failure is the Correctness table's).
    stale = [{**g, "stale": True} for g in gates]
    assert gate_pitfalls({"variants": [{"lineage": {"details": {"image": {}}}, "gates": stale}]}) == []
    ok = [{**gates[0], "status": "pass"}, {**gates[1], "metrics": {"images": 3, "own_path_exact": 3}}]
    assert gate_pitfalls({"variants": [{"lineage": {"details": {"image": {"h": 1}}}, "gates": ok}]}) == []
    other = [{"gate": "questions", "stale": False, "status": "fail", "findings": ["lost 2"], "metrics": {}}]
    assert gate_pitfalls({"variants": [{"lineage": {"details": {}}, "gates": other}]}) == []


# --- CPU classes (issue 34) ------------------------------------------------------------------------

HOST_CPU = {"arch": "x86_64", "features": ["avx", "avx2", "avx512f", "avx512vnni"], "host": "vm", "how": "native",
            "key": "x86_64:avx+avx2+avx512f+avx512vnni", "label": "x86-64 AVX-512 VNNI"}
AVX2_CPU = {"arch": "x86_64", "features": ["avx", "avx2"], "host": "vm", "how": "cpuid_mask",
            "key": "x86_64:avx+avx2", "label": "x86-64 AVX2"}


def _classes(lin: Lineage, sha: str, avx2_status: str = "fail") -> None:
    """questions on this host's class and on a masked AVX2 class: the same bytes, another reply there."""
    host_reply = [{"case": "What is 2 + 3?", "reply": "2 + 3 = 5"}, {"case": "Capital of France?", "reply": "Paris."}]
    avx2_reply = [{"case": "What is 2 + 3?", "reply": "Two and three are two different numbers."},
                  {"case": "Capital of France?", "reply": "Paris."}]
    lin.gate(sha, "questions", "pass", ["Sanity questions: 2/2 answered as expected"], device="local-cpu",
             host="vm", cpu_class=HOST_CPU["key"], cpu=HOST_CPU, replies=host_reply)
    lin.gate(sha, "questions", avx2_status, ["Sanity questions: 1/2 answered as expected"], device="cpu-x86-avx2",
             host="vm", cpu_class=AVX2_CPU["key"], cpu=AVX2_CPU, replies=avx2_reply)


def test_the_card_tells_cpu_classes_apart_and_quotes_both_replies(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    _classes(lin, a)
    card, md, failures = lin.compose()
    assert failures == []
    section = md.split("## CPU classes")[1]
    assert "| `tiny_r.litertlm` | x86-64 AVX-512 VNNI | this host's own, host vm | verified |" in section
    assert "| `tiny_r.litertlm` | x86-64 AVX2 | CPUID-masked on this host, host vm | FAILS: questions |" in section
    assert "x86-64 AVX2: 'Two and three are two different numbers.'" in section
    assert "| questions | x86-64 AVX2 (masked) | fail |" in md.split("## Correctness")[1]
    pit = [p for p in card["pitfalls"] if "CPU classes" in p]
    assert len(pit) == 1 and "'2 + 3 = 5'" in pit[0] and "'Two and three are two different numbers.'" in pit[0]
    assert "It fails on x86-64 AVX2." in pit[0]
    assert "Answers verified on CPU classes: x86-64 AVX-512 VNNI" in md


def test_check_cpu_classes_are_named(tmp_path):
    lin = Lineage(tmp_path)
    a = honest(lin)
    _classes(lin, a)
    card, md, _ = lin.compose()
    facts = lin.facts()
    assert _failures("cpu_classes_are_named", card, facts, md) == []
    # "verified on CPU" with no class is refused.
    bare = md + "\nThis file is verified on CPU.\n"
    assert "without naming the CPU class" in _failures("cpu_classes_are_named", card, facts, bare)[0]
    # A class listed as verified where a gate failed on it.
    forged = md.replace("| FAILS: questions |", "| verified |")
    assert "listed as verified on x86-64 AVX2, but questions did not pass" in \
        _failures("cpu_classes_are_named", card, facts, forged)[0]
    # A class with results that the card leaves out.
    dropped = "\n".join(ln for ln in md.splitlines() if "| x86-64 AVX2 | CPUID-masked" not in ln)
    assert "does not list" in _failures("cpu_classes_are_named", card, facts, dropped)[0]


def test_hub_tags_name_only_the_classes_every_file_passed_on(tmp_path):
    from farm.cards.classes import verified_tags

    lin = Lineage(tmp_path)
    a = honest(lin)
    _classes(lin, a)
    assert verified_tags(lin.facts()) == ["cpu:x86-64-avx-512-vnni"]
    _classes(lin, a, avx2_status="pass")  # the control: AVX2 passing, both classes are tagged
    assert verified_tags(lin.facts()) == ["cpu:x86-64-avx-512-vnni", "cpu:x86-64-avx2"]


def test_an_emulated_class_a_file_was_too_large_for_is_said_not_measured(tmp_path):
    arm = {"arch": "aarch64", "features": ["asimd", "asimddp"], "host": "vm", "how": "qemu",
           "key": "aarch64:asimd+asimddp", "label": "arm64 dotprod"}
    lin = Lineage(tmp_path)
    a = honest(lin)
    _classes(lin, a, avx2_status="pass")
    why = "not measured on arm64 dotprod (cpu-arm64-dotprod): the file is 95 MB, over the device's emulation limit"
    lin.gate(a, "questions", "skipped", [why], device="cpu-arm64-dotprod", host="vm", cpu_class=arm["key"], cpu=arm)
    card, md, failures = lin.compose()
    assert failures == []
    row = next(ln for ln in md.splitlines() if "| arm64 dotprod |" in ln)
    assert "| not measured: not measured on arm64 dotprod" in row and "| verified |" not in row
    from farm.cards.classes import verified_tags

    assert "cpu:arm64-dotprod" not in verified_tags(lin.facts())
    # The negative control: the same row claiming "verified" is refused.
    forged = md.replace(row, row.replace("| not measured:", "| verified | x"))
    assert any("where nothing was measured" in f
               for f in _failures("cpu_classes_are_named", card, lin.facts(), forged))
