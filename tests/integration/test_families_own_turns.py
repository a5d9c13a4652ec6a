"""The family matrix's families with their own turn formats (issue 18), one float32 build each
through every stage and gate (examples/families/): what each family module declares is what
happens, and each family's own end-of-turn token (and, where the runtime knows the family by name,
its model type) left out of a crafted bundle fails the metadata gate on that check. The int8
column is `make families` (README "Families, measured"): one build per family here keeps the suite
in budget."""

import pytest

from farmtest.families import FamilyHome, check_family

pytestmark = pytest.mark.slow

FAMILIES = ["phi3", "mistral", "ministral", "olmo2", "granite", "gemma3", "gemma4", "exaone4", "cohere2"]


@pytest.fixture(scope="module")
def fh(tmp_path_factory, prefect_server, toolchain_python) -> FamilyHome:
    return FamilyHome(tmp_path_factory.mktemp("families-own-turns"), prefect_server)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_family_builds_as_its_module_declares_and_its_special_metadata_has_a_negative_control(
        fh, family, toolchain_python, tmp_path):
    check_family(fh, family, toolchain_python, tmp_path)
