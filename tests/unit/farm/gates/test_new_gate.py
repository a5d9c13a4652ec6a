"""Adding a gate is two new files and no edit elsewhere (issue 36): its contract in
farm_common/gates/<gate>.py (settings, spec, request builder, card line) and its measurement in
farm_toolchain/gates/<gate>.py. In a copy of the packages, a dummy gate added that way is
registered on both sides in its declared order, its `gates.<gate>:` section validated by its own
model (a wrong key refused), its request built, its measurement run (passing, and failing on a
crafted input), and its line rendered in the card section it declares."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from farmtest import REPO

CONTRACT = '''"""size_probe: the bundle is at most `max_bytes` long (a dummy gate of the test)."""

from __future__ import annotations

from pydantic import Field

from farm_common.gates.registry import GATES, GateParams, GateRequest


class SizeProbe(GateParams):
    max_bytes: int = Field(1000, ge=1)


def card_line(result, where):
    if result is None:
        return None
    return f"- Size probe ({result['status']}): {result['metrics']['bytes']} bytes ({where})."


@GATES.register("size_probe", kind="robustness", version=1, params=SizeProbe, order=95,
                card_section="usage", card_line=card_line, description="the bundle's size against a bound")
def request(ctx, p: SizeProbe) -> GateRequest:
    return GateRequest(inputs={"bundle_path": "bundle"}, args=p.model_dump())
'''

MEASUREMENT = '''"""size_probe's measurement (a dummy gate of the test)."""

from __future__ import annotations

import os

from farm_common.gates.size_probe import SizeProbe
from farm_toolchain.gates import common
from farm_toolchain.gates.registry import MEASUREMENTS


@MEASUREMENTS.register("size_probe")
def measure(request):
    p = common.settings(request, SizeProbe)
    size = os.path.getsize(common.require_file(request, "bundle_path", "the bundle"))
    ok = size <= p.max_bytes
    return common.result("pass" if ok else "fail", {"bytes": size}, [f"{size} bytes, bound {p.max_bytes}"],
                         findings=[] if ok else [f"{size} bytes is over {p.max_bytes}"])
'''

SCRIPT = r'''
import json, sys
from pathlib import Path
from farm.errors import BadInput
from farm.gates.config import GateConfig
from farm.cards.render import gate_lines
from farm_common.gates import GATES
from farm_toolchain.gates.registry import MEASUREMENTS

out = {"gates": GATES.names(), "measurements": sorted(MEASUREMENTS.load())}
cfg = GateConfig.model_validate({"size_probe": {"max_bytes": 10}})
try:
    GateConfig.model_validate({"size_probe": {"max_byte": 10}})
    out["bad_key"] = "accepted"
except (BadInput, ValueError) as exc:
    out["bad_key"] = str(exc)
spec = GATES.get("size_probe")
req = spec.build(None, cfg.params_for(spec))
bundle = Path(sys.argv[1])
results = {}
for name, size in (("small", 4), ("large", 40)):
    bundle.write_bytes(b"x" * size)
    results[name] = MEASUREMENTS.get("size_probe")({**req.args, "bundle_path": str(bundle)})
out["results"] = {k: (r["status"], r["metrics"]) for k, r in results.items()}
row = {**results["small"], "gate": "size_probe", "stale": False, "basis": "this file",
       "measured_on_created": "2026-12-07T00:00:00"}
out["card"] = gate_lines({"gates": [row]}, "usage")
print(json.dumps(out))
'''


def test_a_gate_added_as_two_files_registers_runs_and_renders(tmp_path: Path):
    tree = tmp_path / "house"
    for pkg in ("farm", "farm_common", "farm_toolchain"):
        shutil.copytree(REPO / pkg, tree / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "farm_common" / "gates" / "size_probe.py").write_text(CONTRACT)
    (tree / "farm_toolchain" / "gates" / "size_probe.py").write_text(MEASUREMENT)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "b.litertlm")], cwd=tree,
                          capture_output=True, text=True, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert "size_probe" in out["gates"] and "size_probe" in out["measurements"]
    assert out["gates"].index("size_probe") == out["gates"].index("metadata") - 1  # order 95, before metadata's 100
    assert "size_probe.max_byte" in out["bad_key"] and "Extra inputs" in out["bad_key"]
    assert out["results"] == {"small": ["pass", {"bytes": 4}], "large": ["fail", {"bytes": 40}]}
    # Its line in the section it declares, after the gates before it there (chat_template, order 60).
    assert out["card"] == ["- Chat template: not measured", "- Size probe (pass): 4 bytes (this file, 2026-12-07)."]
    # The house itself is untouched: the dummy lived in the copy only.
    from farm_common.gates import GATES

    assert "size_probe" not in GATES.names()
