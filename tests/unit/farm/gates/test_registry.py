"""The gate registry: every gate is one unit on each side (spec + request builder here, measurement in
farm_toolchain), joined by one name; settings validated by each gate's own model before anything runs."""

import pytest

from farm.config import load_config
from farm_common.wire import BadInput  # the contract's (farm.errors.BadInput is one)
from farm_common.gates import GATES, ROLES, GateRequest, for_sibling, of_kind, select
from farm.gates.config import GateConfig
from farm_toolchain.gates.registry import MEASUREMENTS
from farmtest import REPO


def test_every_gate_has_both_halves_and_nothing_else_is_registered():
    measurements = MEASUREMENTS.load()
    names = set(GATES.names())
    assert set(measurements) == names, (
        f"orchestrator only: {names - set(measurements)}; toolchain only: {set(measurements) - names}")
    for spec in GATES:
        assert spec.kind in {"parity", "quality", "tokenizer", "robustness", "metadata"}
        assert spec.version >= 1 and spec.description and callable(spec.build)


def test_a_gate_registered_twice_is_refused():
    with pytest.raises(RuntimeError, match="registered twice"):
        GATES.register("metadata", kind="metadata", version=1)(lambda ctx, p: None)
    with pytest.raises(RuntimeError, match="registered twice"):
        MEASUREMENTS.register("metadata")(lambda r: r)


def test_gates_run_in_their_declared_order():
    assert GATES.names()[:3] == ["logits_parity_float", "logits_parity", "generation_parity"]
    assert GATES.names()[-1] == "metadata"


class _Ctx:
    """Just enough of a SuiteContext for the request builders."""

    float_sha = "f" * 64
    tokenizer_sha = "t" * 64
    prefill_length = 8
    reference_stop_ids = [2]
    family = None
    image = {"height": 64, "width": 64}

    def identity(self, role):
        return "d" * 64 if role == "text_twin" else None


def test_every_builder_names_inputs_by_role_and_passes_json_args():
    import json

    cfg = GateConfig.model_validate({"questions": {"questions": [{"prompt": "2+3?", "expect": "5"}]}, "arithmetic": {}})
    for spec in GATES:
        req = spec.build(_Ctx(), cfg.params_for(spec))
        assert isinstance(req, GateRequest), spec.name
        assert set(req.inputs.values()) <= set(ROLES)
        json.dumps(req.args)  # the request digest and the recorded config are JSON
    assert GATES.get("logits_parity_float").target == "float"


def test_default_selection_leaves_out_optional_and_skipped():
    names = [g.name for g in select(None)]
    assert "questions" not in names and "arithmetic" not in names and "chat_template" in names
    assert "grounding_probes" not in names  # trained image models only: a config section enables it
    assert "tokenizer_parity" not in [g.name for g in select(None, skip=["tokenizer_parity"])]
    assert "questions" in [g.name for g in select(None, enabled=lambda n: n == "questions")]
    assert {g.name for g in of_kind("parity")} == {"logits_parity_float", "logits_parity", "generation_parity",
                                                   "image_turn_parity", "vision_encoder_parity", "second_turn_parity",
                                                   "text_turn_equality"}
    assert {g.name for g in of_kind("quality")} == {"questions", "arithmetic", "task_accuracy", "grounding_probes"}


def test_unknown_gate_is_bad_input():
    with pytest.raises(BadInput, match="unknown gate 'vibes'"):
        select(["vibes"])


@pytest.mark.parametrize("gates, message", [
    ({"skip": ["no_such_gate"]}, "unknown gate 'no_such_gate'"),
    ({"vibes": {}}, "unknown gate 'vibes'"),
    ({"generation_parity": {"tie_margn": 0.1}}, "generation_parity.tie_margn: Extra inputs are not permitted"),
    ({"generation_parity": {"tie_margin": "big"}}, "generation_parity.tie_margin"),
    ({"generation_parity": {"prompts": []}}, "generation_parity.prompts"),
    ({"generation_parity": {"prompts": ["a"], "min_exact_matches": 2}}, "more than the 1 prompts"),
    ({"questions": {"questions": [{"prompt": "x", "expect": "(unclosed"}]}}, "not a valid regex"),
    ({"questions": {}}, "questions.questions: Field required"),
    ({"prompt_lengths": {"max_logprob_diff": 0}}, "prompt_lengths.max_logprob_diff"),
    ({"state_isolation": {"known_difference": "x"}}, "state_isolation.known_difference"),
    ({"metadata": {"anything": 1}}, "metadata.anything: Extra inputs are not permitted"),
    ({"logits_parity": {"pearson_min": 2}}, "logits_parity.pearson_min"),
])
def test_gate_settings_are_validated_by_each_gates_model(tmp_path, gates, message):
    import yaml

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"name": "x", "family": "qwen3_5", "source": {"kind": "generated", "family": "qwen3_5"},
                                   "gates": gates}))
    with pytest.raises(BadInput) as info:
        load_config(cfg)
    assert message in str(info.value) and "Value error" not in str(info.value)


def test_gate_config_round_trips_through_its_recorded_form():
    cfg = GateConfig.model_validate({"skip": ["prompt_lengths"], "generation_parity": {"max_tokens": 8}})
    again = GateConfig.model_validate(cfg.model_dump(mode="json"))
    assert again == cfg and again.params_for("generation_parity").max_tokens == 8
    assert again.params_for("prompt_lengths").tie_margin == 0.01  # the gate's default
    assert again.enables("generation_parity") and not again.enables("questions")


def test_shipped_configs_validate(tmp_path):
    """Every shipped config (examples/ and examples/families/) loads; the glob is checked to find
    them, and the control — one with a gate setting no gate knows — is refused."""
    paths = sorted((REPO / "examples").rglob("*.yaml"))
    assert len(paths) >= 5 + 16 and any(p.parent.name == "families" for p in paths), paths
    for path in paths:
        assert load_config(path).name
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "examples" / "tiny-qwen35.yaml").read_text() + "\ngates:\n  no_such_gate: {x: 1}\n")
    with pytest.raises(BadInput, match="unknown gate 'no_such_gate'"):
        load_config(bad)


def test_a_sibling_recheck_leaves_out_what_the_siblings_config_skips():
    # Gemma 3 (a base model) skips the conversation gates: a robustness re-check triggered by a
    # sibling's prompt_lengths recorded multi_turn and state_isolation failures on it (2026-12-04).
    robustness = [g.name for g in of_kind("robustness")]
    assert {"prompt_lengths", "multi_turn", "state_isolation"} <= set(robustness)
    kept = for_sibling(robustness, ["chat_template", "multi_turn", "state_isolation"])
    assert "prompt_lengths" in kept and "multi_turn" not in kept and "state_isolation" not in kept
    assert for_sibling(robustness, []) == robustness  # nothing skipped: every gate of the kind


@pytest.mark.parametrize("name", ["image_turn_parity", "vision_encoder_parity", "second_turn_parity",
                                  "text_turn_equality"])
def test_the_image_gates_apply_to_image_bundles_only(name):
    spec = GATES.get(name)
    params = GateConfig().params_for(spec)
    assert spec.build(_Ctx(), params) is not None

    class _TextCtx(_Ctx):
        image = None

    assert spec.build(_TextCtx(), params) is None


def test_text_turn_equality_needs_a_text_build_on_record():
    spec = GATES.get("text_turn_equality")

    class _NoTwin(_Ctx):
        def identity(self, role):
            return None

    assert spec.build(_NoTwin(), GateConfig().params_for(spec)) is None
