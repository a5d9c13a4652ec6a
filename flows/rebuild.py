"""The rebuild flow: a recorded bundle made again from its recorded inputs in a clean working area
(farm/rebuild.py): MATCH, or which sections differ and why, kept as a Prefect markdown
artifact `rebuild-<sha12>`."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from farm.resources import get_resources
from farm.rebuild import rebuild as rebuild_bundle
from flows.tasks.common import progress


@flow(name="rebuild")
def rebuild(sha256: str, runtime: str | None = None) -> dict[str, Any]:
    """sha256: a full sha256 or a unique prefix of a farm-built bundle."""
    out = rebuild_bundle(get_resources(runtime), sha256, progress())
    rows = "\n".join(f"| {d['type']} | {d['status']} | `{str(d['recorded'])[:12]}` | `{str(d['rebuilt'])[:12]}` |"
                     for d in out["sections"])
    why = "".join(f"- {w}\n" for w in out["why"])
    create_markdown_artifact(
        key=f"rebuild-{out['sha256'][:12]}",
        markdown=f"# rebuild {out['sha256'][:12]}: {out['verdict']}\n\nrebuilt `{out['rebuilt_sha256']}` in "
                 f"{out['seconds']} s\n\n| section | status | recorded | rebuilt |\n|---|---|---|---|\n{rows}\n\n{why}",
        description=out["verdict"])
    return out
