"""The family matrix's ChatML families (issue 18), one float32 build each through every stage and
gate (examples/families/): what each family module declares is what happens, a known convert
failure is refused before any work and on record, and where a family's metadata is special (its
model type) a crafted bundle fails the metadata gate on that check. The int8 column is `make
families` (README "Families, measured"): one build per family here keeps the suite in budget."""

import pytest

from farmtest.families import FamilyHome, check_family

pytestmark = pytest.mark.slow

FAMILIES = ["qwen2", "qwen3", "qwen3_moe", "smollm3", "lfm2", "lfm2_moe"]


@pytest.fixture(scope="module")
def fh(tmp_path_factory, prefect_server, toolchain_python) -> FamilyHome:
    return FamilyHome(tmp_path_factory.mktemp("families-chatml"), prefect_server)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_family_builds_as_its_module_declares_and_its_special_metadata_has_a_negative_control(
        fh, family, toolchain_python, tmp_path):
    check_family(fh, family, toolchain_python, tmp_path)
