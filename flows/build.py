"""The build flow: source → convert → quantize → package → hash → gates → device fan-out → card.

Parameters are plain strings so a deployment can be run from the Prefect UI ("rebuild this config
with that recipe"). Each task returns a small reference; bytes stay in the artifact store."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed

from farm.pipeline import Job, build_summary, run_stages
from farm.preflight import preflight
from farm.resources import get_resources
from farm.summary import artifact_key, device_row, gate_row, summary_markdown
from flows.common import run_flow
from flows.tasks.stages import run_as_task


@flow(name="build")
def build(config_path: str, recipe: str | None = None, run_gates: bool = True, run_bench: bool = True,
          runtime: str | None = None):
    """The summary; a build whose gates fail ends Failed (after recording every result and running
    the devices), with the summary as the failed state's data. `runtime`: the litert-lm release the
    gates run on (None: the toolchain lock's), a parameter, so a worker gets it too."""
    res = get_resources()
    job = Job.load(config_path, recipe, res)
    cfg, rcp = job.config, job.recipe
    preflight(res, job, gates=run_gates)  # bad input before any work (farm/preflight.py), for a build from the UI too

    done = run_stages(res, job, run_as_task)
    summary = build_summary(job, done)
    sha = summary["artifact"]["sha256"]
    # The gate, device and card flows are imported when they run: together they are 0.4 s of
    # imports (the gate registry, the device runners) that a `--no-gates` rebuild never uses.
    if run_gates:
        from flows.gates import gate_suite

        # Gates run on every build, cached stages or not: each run is a measurement of these bytes
        # with this runtime, and a failure re-checks the recipe's other files (flows/gates.py).
        suite = run_flow(gate_suite, sha, None, cfg.gates, reuse=True, runtime=runtime)
        summary["gates"] = [gate_row(r) for r in suite["results"]]
        summary["rechecks"] = suite["rechecks"]
    if run_bench:
        from flows.fanout import fanout

        # Device fan-out after the gates: every enabled device in infra/devices.yaml (local-cpu by
        # default). A device's failure is recorded as its own result, not a failed build. A device
        # that measured these bytes already is not measured again (`farm bench` measures afresh):
        # a no-op build re-benchmarked every device, and so published a new card, each time.
        summary["devices"] = [device_row(r) for r in fanout(sha, reuse=True)]
    if run_gates:
        # The card is the last stage: one more reader of lineage, now holding this build's gate and
        # device results. A card that fails a mechanical check is not published (the summary says why).
        from flows.card import publish_card

        summary["card"] = publish_card(cfg.name, cfg.card.model_dump(mode="json"))
    create_markdown_artifact(key=artifact_key(summary), markdown=summary_markdown(summary),
                             description=cfg.bundle_name(rcp.name))
    from farm.gates.suite import FAILING

    failed = [g for g in summary.get("gates", []) if g["status"] in FAILING]
    if failed:
        return Failed(message=f"gates failed: {', '.join(g['gate'] for g in failed)}", data=summary)
    return summary

