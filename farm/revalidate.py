"""Re-validation when a new litert-lm release appears: which releases the package index has that
lineage has not measured, and what changed between two releases on the farm's published files
(per artifact and gate: pass→fail, fail→pass; the local CPU throughput change).

The index is read with its JSON API (PEP 691 `application/vnd.pypi.simple.v1+json`, versions from
PEP 700's `versions` or from the file names), at FARM_INDEX_URL or the index pip is configured with
(PIP_INDEX_URL, `pip config get global.index-url`, else PyPI). litert-lm and litert-lm-api are
released together; a version counts when the index has both (the runtime env pins them together,
with litert-lm-builder).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

from packaging.version import InvalidVersion, Version

from farm.errors import BuildFailed
from farm_common.wire import FAILING, WORKS

PROJECTS = ("litert-lm", "litert-lm-api")
_FILE_VERSION = re.compile(r"^[A-Za-z0-9_.]+?-(\d[^-]*?)(?:-|\.tar\.gz$|\.zip$)")


def configured_index_url(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True,
                             text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "https://pypi.org/simple"


def released_versions(index_url: str, project: str, timeout: float = 30) -> list[str]:
    """Every release of `project` the index lists (not yanked), oldest first."""
    url = f"{index_url.rstrip('/')}/{project}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            data = json.loads(r.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise BuildFailed(f"the package index {index_url} did not answer for {project} ({exc}): set FARM_INDEX_URL "
                          "to an index with the PEP 691 JSON API") from None
    versions = set(data.get("versions") or [])
    if not versions:
        for f in data.get("files") or []:
            if f.get("yanked"):
                continue
            m = _FILE_VERSION.match(f.get("filename", ""))
            if m:
                versions.add(m.group(1))
    good = []
    for v in versions:
        try:
            parsed = Version(v)
        except InvalidVersion:
            continue
        if not parsed.is_prerelease:
            good.append(v)
    return sorted(good, key=Version)


def new_releases(index_url: str, recorded: list[str]) -> list[str]:
    """Releases newer than the newest the farm has measured, listed for every runtime project."""
    common = set(released_versions(index_url, PROJECTS[0]))
    for p in PROJECTS[1:]:
        common &= set(released_versions(index_url, p))
    newest = max((Version(v) for v in recorded if _valid(v)), default=None)
    return sorted((v for v in common if newest is None or Version(v) > newest), key=Version)


def _valid(v: str) -> bool:
    try:
        Version(v)
        return True
    except InvalidVersion:
        return False


def previous_release(recorded: list[str], version: str) -> str | None:
    """The newest recorded release other than `version`, below it if there is one."""
    others = sorted((v for v in recorded if v != version and _valid(v)), key=Version)
    below = [v for v in others if Version(v) < Version(version)]
    return (below or others or [None])[-1]


def release_delta(facts: dict[str, Any], previous: str | None, version: str, host: str | None = None) -> dict[str, Any]:
    """`facts`: {sha: {"name", "gates": [results], "devices": [results]}} for the published files.
    Per artifact, gate and CPU class: the newest status on each release, and a change label (a
    class's answers are compared with that class's only); per artifact the local CPU decode/prefill
    tok/s on each release, measured on `host` (speed is a machine's: another host's figure is not
    a "before")."""
    rows, regressions = [], []
    for sha, f in facts.items():
        latest: dict[tuple[str, str, str], str] = {}
        labels: dict[str, str] = {}
        for g in f["gates"]:
            if g.get("recheck_id") is None:
                cls = g.get("cpu_class") or ""
                latest[(g["gate"], cls, g["runtime_version"])] = g["status"]
                labels[cls] = (g.get("cpu") or {}).get("label") or ""
        for gate, cls in sorted({k[:2] for k in latest}):
            before = latest.get((gate, cls, previous)) if previous else None
            after = latest.get((gate, cls, version))
            if after is None:
                continue
            change = ("new" if before is None else "same" if before == after
                      else "regression" if before in WORKS and after in FAILING
                      else "fixed" if before in FAILING and after in WORKS else "changed")
            row = {"artifact_sha256": sha, "name": f["name"], "gate": gate, "cpu": labels.get(cls) or None,
                   "before": before, "after": after, "change": change}
            rows.append(row)
            if change == "regression":
                regressions.append(row)
    speed = []
    for sha, f in facts.items():
        by = {}
        for d in f["devices"]:
            if d["device_id"] == "local-cpu" and d["status"] == "verified" and (host is None or d.get("host") == host):
                by[d["runtime_version"]] = d  # the newest per release
        a, b = by.get(previous), by.get(version)
        if b is not None:
            speed.append({"artifact_sha256": sha, "name": f["name"], "host": b.get("host"),
                          "decode_before": a and a["decode_tokens_per_s"], "decode_after": b["decode_tokens_per_s"],
                          "prefill_before": a and a["prefill_tokens_per_s"], "prefill_after": b["prefill_tokens_per_s"],
                          "decode_change_pct": round(100 * (b["decode_tokens_per_s"] / a["decode_tokens_per_s"] - 1), 1)
                          if a and a.get("decode_tokens_per_s") else None})
    return {"runtime": "litert-lm", "version": version, "previous": previous, "gates": rows, "speed": speed,
            "regressions": regressions}


def delta_markdown(delta: dict[str, Any]) -> str:
    lines = [f"# litert-lm {delta['version']} vs {delta['previous'] or '(none recorded)'}", "",
             f"{len(delta['regressions'])} regression(s) (a gate that passed on the previous release fails on this one).",
             "", "| file | gate | CPU class | before | after | change |", "|---|---|---|---|---|---|"]
    lines += [f"| `{r['name']}` `{r['artifact_sha256'][:12]}` | {r['gate']} | {r.get('cpu') or '-'} | "
              f"{r['before'] or '-'} | {r['after']} | {r['change']} |" for r in delta["gates"]]
    if delta["speed"]:
        lines += ["", "| file | host | decode tok/s before | after | change | prefill tok/s before | after |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| `{s['name']}` | {s.get('host') or '-'} | {s['decode_before'] or '-'} | {s['decode_after']} | "
                  f"{'-' if s['decode_change_pct'] is None else str(s['decode_change_pct']) + ' %'} | "
                  f"{s['prefill_before'] or '-'} | {s['prefill_after']} |" for s in delta["speed"]]
    return "\n".join(lines) + "\n"
