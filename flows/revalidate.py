"""Scheduled re-validation (the served `revalidate` deployment runs hourly; `farm revalidate` by hand):
for each litert-lm release the package index has and lineage has not measured, emit the Prefect
event `farm.runtime.released`, make the release's runtime env (cached by version), re-run every
gate and a local CPU benchmark on every published file with it (results recorded per runtime
version), and write the release delta (per file and gate: pass→fail, fail→pass; throughput change)
as a Prefect markdown artifact and in lineage (kind `release_delta`). A regression re-checks the
file's siblings (the gate suite's own re-check) and re-renders the affected models' cards, which
then show the failing row for that release."""

from __future__ import annotations

import json
import socket
import tempfile
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from farm.lineage.queries.cards import published_bundles
from farm.lineage.queries.gates import recorded_runtime_versions, runtime_facts
from farm.lineage.record import record_artifact
from farm.resources import get_resources
from farm.revalidate import configured_index_url, delta_markdown, new_releases, previous_release, release_delta
from flows.card import publish_card
from flows.common import run_flow
from flows.gates import gate_suite
from flows.tasks.bench import bench_device_task

RELEASED_EVENT = "farm.runtime.released"


def _announce(version: str, files: int) -> None:
    from prefect.events import emit_event

    emit_event(event=RELEASED_EVENT,
               resource={"prefect.resource.id": f"pypi.litert-lm.{version}", "prefect.resource.name": f"litert-lm {version}"},
               payload={"runtime": "litert-lm", "version": version, "published_files": files})


@flow(name="revalidate")
def revalidate(runtime: str | None = None, index_url: str | None = None) -> dict[str, Any]:
    """runtime: re-validate on this release (by hand); None: every new release the index lists."""
    res = get_resources()
    log = get_run_logger()
    with res.db.session() as s:
        recorded = recorded_runtime_versions(s)
        shas = published_bundles(s)
    if runtime:
        versions = [runtime]
    else:
        index = configured_index_url(index_url or res.settings.index_url)
        versions = new_releases(index, recorded)
        log.info("index %s: new litert-lm releases %s (recorded %s)", index, versions or "none", recorded)
    from farm.devices import load_registry

    local = "local-cpu" in {d.id for d in load_registry().enabled()}
    deltas = []
    for version in versions:
        _announce(version, len(shas))
        for sha in shas:
            run_flow(gate_suite, sha, None, None, recheck_failures=True, reuse=True, runtime=version)
            if local:
                bench_device_task(sha, "local-cpu", version)
        with res.db.session() as s:
            facts = runtime_facts(s, shas)
        delta = release_delta(facts, previous_release(recorded, version), version, host=socket.gethostname())
        affected = sorted({facts[r["artifact_sha256"]]["model_id"] for r in delta["regressions"]} - {None})
        delta["cards_rerendered"] = {m: publish_card(m)["published"] for m in affected}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "delta.json"
            path.write_text(json.dumps(delta, indent=2, sort_keys=True) + "\n")
            ref = res.store.put_file(path)
        with res.db.session() as s:
            record_artifact(s, sha256=ref.sha256, kind="release_delta", size=ref.size, uri=ref.uri,
                            name=f"litert-lm-{version}.delta.json", chain="release/litert-lm",
                            inputs={f"bundle{i}": sha for i, sha in enumerate(shas)},
                            details={"version": version, "previous": delta["previous"],
                                     "regressions": len(delta["regressions"]), "files": len(shas)})
        create_markdown_artifact(key=f"release-litert-lm-{version.replace('.', '-')}", markdown=delta_markdown(delta),
                                 description=f"litert-lm {version}: {len(delta['regressions'])} regression(s)")
        deltas.append({**delta, "delta_sha256": ref.sha256})
    return {"recorded": recorded, "versions": versions, "files": shas, "deltas": deltas}
