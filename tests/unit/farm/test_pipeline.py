"""farm/pipeline.py run_stages: a stage that fails for a reason other than bad input is recorded in
lineage with its tool and that tool's version (issue 18: the family matrix names what fails); bad
input is the user's to fix and records nothing (the negative control)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import select

from farm.errors import BadInput, BuildFailed
from farm.lineage.db import Database
from farm.lineage.models import StageFailure, Toolchain
from farm.lineage.record import insert_ignore
from farm.pipeline import Job, run_stages
from farm.resources import Resources
from farm.settings import Settings
from farm.store.local import LocalStore
import farmtest


@pytest.fixture
def res(tmp_path):
    r = Resources(Settings(home=tmp_path / "home", cache=tmp_path / "cache"))
    r.__dict__["store"] = LocalStore(tmp_path / "home" / "store")
    r.__dict__["db"] = Database(f"sqlite:///{tmp_path / 'lineage.db'}")
    r.__dict__["toolchain"] = SimpleNamespace(identity={"packages": {"litert-torch": "0.10.0"}})
    r.__dict__["toolchain_id"] = "t" * 64
    with r.db.session() as s:
        insert_ignore(s, Toolchain, id="t" * 64, python_version="3.11", packages={"litert-torch": "0.10.0"}, freeze="")
    return r


def _failing_at(stage_name: str, exc: Exception):
    def run(stage, job, done):
        if stage.name == stage_name:
            raise exc
        return SimpleNamespace(source_id="s" * 64) if stage.name == "source" else object()

    return run


def test_a_tool_failure_in_a_stage_is_recorded_with_the_tool_and_its_version(res):
    job = Job.load(farmtest.REPO / "examples" / "families" / "tiny-qwen3_moe.yaml")
    with pytest.raises(BuildFailed):
        run_stages(res, job, _failing_at("convert", BuildFailed("export: Lowering not found: aten.histc.default")))
    with res.db.session() as s:
        rows = s.scalars(select(StageFailure)).all()
    assert len(rows) == 1
    f = rows[0]
    assert (f.model_id, f.family, f.recipe_name, f.stage, f.tool, f.tool_version) == (
        "tiny-qwen3_moe", "qwen3_moe", "dynamic_wi8_afp32", "convert", "litert-torch", "0.10.0")
    assert f.source_id == "s" * 64 and "aten.histc" in f.error and f.recipe_digest == job.recipe.digest()


def test_bad_input_in_a_stage_records_no_failure(res):
    job = Job.load(farmtest.REPO / "examples" / "families" / "tiny-qwen3_moe.yaml")
    with pytest.raises(BadInput):
        run_stages(res, job, _failing_at("quantize", BadInput("recipe 'x': rule 'y' matched no op")))
    with res.db.session() as s:
        assert s.scalars(select(StageFailure)).all() == []


def _with_known_convert_failure(monkeypatch, versions=frozenset({"0.10.0"})):
    from farm.families import KnownFailure, get_family

    known = KnownFailure("convert", "litert-torch", versions, "export: 'NoneType' object has no attribute 'layers'",
                         "2026-12-06, farm families --build")
    monkeypatch.setattr(type(get_family("qwen3")), "known_failures", (known,))


def test_a_known_stage_failure_of_the_installed_tool_is_refused_before_any_work_and_recorded(res, monkeypatch):
    from farm.preflight import check_known_failures
    from farm.refusals import Refused

    job = Job.load(farmtest.REPO / "examples" / "families" / "tiny-qwen3.yaml")
    check_known_failures(res, job)  # the family declares none: nothing refused
    _with_known_convert_failure(monkeypatch)
    with pytest.raises(Refused, match=r"refused \(known_failure\): family qwen3 fails in the convert stage with "
                                      r"litert-torch 0.10.0: export: 'NoneType'.*--measure-known-failures"):
        check_known_failures(res, job)
    with res.db.session() as s:
        (f,) = s.scalars(select(StageFailure)).all()
    assert (f.stage, f.tool, f.tool_version) == ("convert", "litert-torch", "0.10.0")
    assert f.error.startswith("refused (known_failure)")


def test_a_known_failure_of_another_version_or_measured_again_is_not_refused(res, monkeypatch):
    from farm.preflight import check_known_failures
    from farm.settings import Settings

    job = Job.load(farmtest.REPO / "examples" / "families" / "tiny-qwen3.yaml")
    _with_known_convert_failure(monkeypatch, frozenset({"0.9.0"}))
    check_known_failures(res, job)  # measured on another litert-torch: this one may convert it
    _with_known_convert_failure(monkeypatch)
    res.__dict__["settings"] = Settings(home=res.settings.home, cache=res.settings.cache, measure_known_failures=True)
    check_known_failures(res, job)  # --measure-known-failures: built, to measure it again
    with res.db.session() as s:
        assert s.scalars(select(StageFailure)).all() == []


def test_an_image_build_needs_a_family_whose_vision_encoder_litert_torch_exports():
    from farm.config import BuildConfig
    from farm.errors import BadInput
    from farm.preflight import check_vision

    src = {"kind": "generated", "family": "gemma3_vl"}
    check_vision(BuildConfig.model_validate({"name": "ok", "family": "gemma3_vl", "source": src, "vision": {}}))
    check_vision(BuildConfig.model_validate({"name": "text", "family": "gemma3", "source": src}))
    with pytest.raises(BadInput, match="family 'gemma3' has no vision encoder that litert-torch exports"):
        check_vision(BuildConfig.model_validate({"name": "no", "family": "gemma3", "source": src, "vision": {}}))


def test_a_recipe_this_checkout_lacks_is_the_one_lineage_recorded_under_its_name(res):
    """A recipe `farm tune` wrote on another host (or in another checkout) builds here from its
    recorded body; without a record (the control) the name is unknown, one line."""
    from farm.lineage.record import record_recipe
    from farm.recipes import RECIPES_DIR, load_recipe

    config = farmtest.REPO / "examples" / "tiny-qwen35.yaml"
    with pytest.raises(BadInput, match="unknown recipe 'tuned-elsewhere'"):
        Job.load(config, "tuned-elsewhere", res)
    body = load_recipe("weight_only_wi8", RECIPES_DIR).model_copy(update={"name": "tuned-elsewhere"})
    with res.db.session() as s:
        record_recipe(s, body.digest(), body.name, body.model_dump(mode="json"), body.render())
    job = Job.load(config, "tuned-elsewhere", res)
    assert job.recipe.name == "tuned-elsewhere" and job.recipe.digest() == body.digest()
    with pytest.raises(BadInput, match="unknown recipe"):
        Job.load(config, "tuned-elsewhere")  # no lineage to ask
