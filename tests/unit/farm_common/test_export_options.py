"""Export option values against litert-torch's declared annotations (farm_common/export_options.py):
each kind of annotation accepts what fits and refuses what does not (the negative controls)."""

from __future__ import annotations

import pytest

from farm_common.export_options import check, problem


@pytest.mark.parametrize("value, annotation", [
    (True, "bool"), (False, "bool | None"), (None, "bool | None"), (3, "int"), (3, "float"), (2.5, "float | None"),
    ("x", "str"), ([8, 16], "list[int]"), ([8], "list[int] | None"), ({"a": 1}, "dict[str, Any] | None"),
    ("text_generation", "ExportTask | str"), (object(), "torch.export.Dim | None"), ("cpu", "Literal['cpu', 'gpu']"),
    (1, "Optional[int]"), ("a", "Union[int, str]"), ({"x": "y"}, "dict"), (5, "Any"),
])
def test_a_value_that_fits_its_declared_type_passes(value, annotation):
    assert problem(value, annotation) is None


@pytest.mark.parametrize("value, annotation", [
    ("sometimes", "bool"), (1, "bool"), (True, "int"), (True, "int | None"), ("3", "int"), ("x", "float"),
    ([8, "16"], "list[int]"), (8, "list[int]"), ([1], "dict[str, Any] | None"), ("tpu", "Literal['cpu', 'gpu']"),
    (2.5, "Optional[int]"), (None, "int"),
])
def test_a_value_of_another_type_is_named_with_what_was_declared(value, annotation):
    assert problem(value, annotation) == annotation


def test_an_unknown_option_is_named_with_its_neighbours_and_a_wrong_type_with_the_declaration():
    schema = {"use_fused_gdn": "bool", "use_sdpa_composite": "bool | None", "cache_length": "int"}
    assert check({"use_fused_gdn": False, "use_sdpa_composite": None}, schema) is None
    assert "'use_fused_gnd' is not one litert-torch takes (did you mean use_fused_gdn, use_sdpa_composite?)" in \
        check({"use_fused_gnd": False}, schema)
    assert check({"use_fused_gdn": "sometimes"}, schema, "litert-torch 0.10.0") == (
        "export option use_fused_gdn: 'sometimes' is not bool (litert-torch 0.10.0 declares use_fused_gdn: bool)")
