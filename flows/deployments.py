"""The deployments a person runs from the Prefect UI, with typed forms: the model and the recipe are
dropdowns (enums of the shipped configs in examples/ and the registered recipes in recipes/), not
path boxes; the runtime is a version string. Served by `python -m flows.serve` (which `farm server
start` runs beside the local server) or registered on a work pool in production.

Configs reach the run through the code every worker has (examples/) or through lineage (a config
recorded with a bundle, `rebuild`), never a path on the host that deployed.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from prefect import flow
from pydantic import BaseModel, ConfigDict, Field

from farm.recipes import RECIPES_DIR, list_recipes

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def shipped_configs() -> dict[str, Path]:
    """{config name: path} of the build configs shipped in examples/, then those a user keeps in
    FARM_HOME/configs/ (`farm build --hub` writes them there) under names the shipped ones do not
    take: the UI's dropdown, as of when the runner started."""
    from farm.settings import get_settings

    out = _configs_in(EXAMPLES)
    return {**_configs_in(get_settings().home / "configs"), **out}


def _configs_in(folder: Path) -> dict[str, Path]:
    """{config name: path} of the YAML build configs in a folder (the name inside the file)."""
    out = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            name = (yaml.safe_load(path.read_text()) or {}).get("name")
        except yaml.YAMLError:
            continue
        if isinstance(name, str):
            out[name] = path
    return out


# Enums made at import from what is shipped: Prefect renders an enum as a dropdown.
ModelChoice = Enum("ModelChoice", {n.replace("-", "_").replace(".", "_"): n for n in shipped_configs()}, type=str)
CONFIG_RECIPE = "(the config's own)"
RecipeChoice = Enum("RecipeChoice", {"config_own": CONFIG_RECIPE, **{n: n for n in list_recipes(RECIPES_DIR)}}, type=str)


class BuildParams(BaseModel):
    """What the UI's build form asks."""

    model_config = ConfigDict(use_enum_values=True)

    model: ModelChoice = Field(description="A shipped build config (examples/*.yaml), by its name.")
    # An enum with a default (not Optional): the UI shows one dropdown, not a type toggle.
    recipe: RecipeChoice = Field(CONFIG_RECIPE, description="A registered recipe (recipes/*.yaml), or the config's own.")
    run_gates: bool = Field(True, description="Run every correctness gate (and render the card).")
    run_devices: bool = Field(True, description="Benchmark on every enabled device.")
    runtime: str | None = Field(None, pattern=r"^\d+\.\d+\.\d+$",
                                description="The litert-lm release the gates run on; empty = the toolchain's.")


@flow(name="build-model")
def build_model(params: BuildParams) -> dict[str, Any]:
    """Build a shipped config (chosen from a list) with a registered recipe, through every stage."""
    from farm.resources import get_resources
    from flows.build import build
    from flows.common import owned_here, run_flow

    name = params.model if isinstance(params.model, str) else params.model.value
    recipe = params.recipe if isinstance(params.recipe, str) else params.recipe.value
    recipe = None if recipe == CONFIG_RECIPE else recipe
    with owned_here(get_resources()):  # a worker that dies with the run: Crashed by the next farm run
        return run_flow(build, str(shipped_configs()[name]), recipe, run_gates=params.run_gates,
                        run_bench=params.run_gates and params.run_devices, runtime=params.runtime)


class HubBuildParams(BaseModel):
    """What the UI's hub build form asks."""

    model_config = ConfigDict(use_enum_values=True)
    repo_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$",
                         description="A Hugging Face model id, org/name.")
    revision: str = Field("main", min_length=1, description="A commit sha or a tag; a branch is pinned to the "
                                                            "commit the hub answers.")
    recipe: RecipeChoice = Field(CONFIG_RECIPE, description="A registered recipe (recipes/*.yaml), or the default.")
    run_gates: bool = Field(True, description="Run every correctness gate (and render the card).")
    run_devices: bool = Field(True, description="Benchmark on every enabled device.")


@flow(name="build-hub")
def build_hub(params: HubBuildParams) -> dict[str, Any]:
    """Build any Hugging Face repository a family converts: the family from its config.json, the
    commit the hub answers, refusals (gated, remote code, pre-quantized, too big for this worker)
    before any download; the config is kept in FARM_HOME/configs/ (farm/hub_config.py)."""
    from farm.hub_config import hub_config
    from farm.resources import get_resources
    from flows.build import build
    from flows.common import owned_here, run_flow

    recipe = params.recipe if isinstance(params.recipe, str) else params.recipe.value
    recipe = None if recipe == CONFIG_RECIPE else recipe
    path = hub_config(get_resources(), params.repo_id, params.revision, recipe)
    with owned_here(get_resources()):
        return run_flow(build, str(path), recipe, run_gates=params.run_gates,
                        run_bench=params.run_gates and params.run_devices)


class TuneParams(BaseModel):
    """What the UI's recipe-search form asks."""

    model_config = ConfigDict(use_enum_values=True)

    model: ModelChoice = Field(description="A shipped build config (examples/*.yaml), by its name.")
    max_kl: float = Field(0.05, ge=0, description="Mean KL vs the float model on the held-out text the recipe may cost.")
    min_top1: float = Field(0.85, ge=0, le=1, description="Top-1 agreement with the float model it must keep.")
    max_bytes_per_param: float | None = Field(None, gt=0, description="Weight bytes per parameter; empty = no limit.")
    max_tries: int = Field(4, ge=1, le=20, description="Candidates built through every gate at most.")
    source_grid: bool = Field(False, description="Search over a source-grid export (a model dequantized from a 4-bit "
                                                 "GGUF: its linears held on their own grid by int4_b32_dwr).")


@flow(name="tune-model")
def tune_model(params: TuneParams) -> dict[str, Any]:
    """Find the smallest recipe for a shipped config that meets a quality target and passes every
    gate (writes recipes/<model>-tuned.yaml on the worker and records the search in lineage)."""
    from farm.resources import get_resources
    from flows.common import owned_here, run_flow
    from flows.tuning import tune

    name = params.model if isinstance(params.model, str) else params.model.value
    with owned_here(get_resources()):
        return run_flow(tune, str(shipped_configs()[name]), params.max_kl, params.min_top1,
                        params.max_bytes_per_param, max_tries=params.max_tries, source_grid=params.source_grid)


def served() -> list[Any]:
    """Every deployment the local runner serves (names as the UI shows them)."""
    from flows.card import card
    from flows.fanout import fanout
    from flows.gates import gate_suite, recheck_siblings
    from flows.rebuild import rebuild
    from flows.revalidate import revalidate
    from farm.settings import get_settings

    return [
        build_model.to_deployment(name="build", description=build_model.__doc__),
        build_hub.to_deployment(name="build-hub", description=build_hub.__doc__),
        tune_model.to_deployment(name="tune", description=tune_model.__doc__),
        rebuild.to_deployment(name="rebuild", description="Rebuild a recorded sha256 and report MATCH or what differs."),
        gate_suite.to_deployment(name="gates", description="Run the gates on a recorded bundle."),
        fanout.to_deployment(name="bench", description="Benchmark a recorded bundle on the registered devices."),
        card.to_deployment(name="card", description="Render, check and publish a model's card; publish_to: also write its model repository (a folder under FARM_HOME/published) or upload it to hf://OWNER/REPO."),
        recheck_siblings.to_deployment(name="recheck-siblings",
                                       description="Re-check the siblings of a failed gate result."),
        revalidate.to_deployment(name="revalidate", interval=get_settings().revalidate_interval_s,
                                 description="Re-validate every published file on each new litert-lm release."),
    ]


#: (deployment name, entrypoint, description) of every deployment; `served()` serves the same flows.
ENTRYPOINTS = [
    ("build", "flows/deployments.py:build_model", "Build a shipped config with a registered recipe."),
    ("build-hub", "flows/deployments.py:build_hub", "Build a Hugging Face repository: family and commit from the hub."),
    ("tune", "flows/deployments.py:tune_model", "Find the smallest recipe for a shipped config that passes every gate."),
    ("rebuild", "flows/rebuild.py:rebuild", "Rebuild a recorded sha256 and report MATCH or what differs."),
    ("gates", "flows/gates.py:gate_suite", "Run the gates on a recorded bundle."),
    ("bench", "flows/fanout.py:fanout", "Benchmark a recorded bundle on the registered devices."),
    ("card", "flows/card.py:card", "Render, check and publish a model's card; publish_to: also write its model repository (a folder under FARM_HOME/published) or upload it to hf://OWNER/REPO."),
    ("recheck-siblings", "flows/gates.py:recheck_siblings", "Re-check the siblings of a failed gate result."),
    ("revalidate", "flows/revalidate.py:revalidate", "Re-validate every published file on each new litert-lm release."),
]


def deploy_all(work_pool: str = "build-pool") -> list[str]:
    """Register every deployment on a work pool (production: the build worker pulls them; the
    docker-compose `deployer` service runs this at start-up). The code is the worker's own checkout
    (`from_source` of this repository), so configs and recipes travel with it or through lineage."""
    from prefect.flows import Flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    from farm.settings import get_settings

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(work_pool)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=work_pool, type="process"))
    names = []
    for name, entrypoint, description in ENTRYPOINTS:
        f = Flow.from_source(source=str(REPO), entrypoint=entrypoint)
        extra = {"interval": get_settings().revalidate_interval_s} if name == "revalidate" else {}
        f.deploy(name=name, work_pool_name=work_pool, description=description, build=False, push=False,
                 print_next_steps=False, **extra)
        names.append(f"{f.name}/{name}")
    return names
