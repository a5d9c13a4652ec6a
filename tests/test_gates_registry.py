import pytest

from farm.config import GateConfig
from farm.errors import BadInput
from farm.gates import BY_NAME, GATES, of_kind, select


def test_default_selection_leaves_out_optional_and_skipped():
    names = [g.name for g in select(None)]
    assert "questions" not in names and "logits_parity" in names and "metadata" in names
    assert "tokenizer_parity" not in [g.name for g in select(None, skip=["tokenizer_parity"])]
    assert "questions" in [g.name for g in select(None, with_optional=True)]


def test_unknown_gate_is_bad_input():
    with pytest.raises(BadInput, match="unknown gate 'vibes'"):
        select(["vibes"])


def test_kinds_group_the_parity_gates():
    assert {g.name for g in of_kind("parity")} == {"logits_parity_float", "logits_parity", "generation_parity"}
    assert all(g.command.startswith("gate_") for g in GATES)
    assert BY_NAME["logits_parity_float"].target == "float"


def test_gate_config_defaults():
    cfg = GateConfig()
    assert cfg.positions == 48 and cfg.prompts and cfg.questions == []
