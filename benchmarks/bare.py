"""litert-torch's own one-call export + quantize + bundle, with the farm's settings: the "bare"
side of the farm-vs-bare ratios (rebuild.py, scale.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bare_export(python: str, model_dir: str, out_dir: Path) -> tuple[float, int]:
    """(wall seconds, peak resident bytes of the export process) for
    `export(..., quantization_recipe="dynamic_wi8_afp32", bundle_litert_lm=True)` on prefill 8,
    cache 64, in a fresh process."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from farm_toolchain.compat import ensure_litert_torch_importable\n"
        "export = ensure_litert_torch_importable()\n"
        "from litert_torch.generative.export_hf.core import exportable_module_config as emc\n"
        "emc._KNOWN_EXTRA_KWARGS = frozenset(emc._KNOWN_EXTRA_KWARGS | {'use_fused_gdn'})\n"
        "export.export(model=%r, output_dir=%r, prefill_lengths=[8], cache_length=64,\n"
        "              quantization_recipe='dynamic_wi8_afp32', bundle_litert_lm=True, use_fused_gdn=False)\n"
    ) % (str(REPO), model_dir, str(out_dir))
    # GNU time's %M: this process's own peak (RUSAGE_CHILDREN would be the largest of every child
    # so far, the farm's toolchain processes included).
    peak_file = Path(out_dir).parent / f".{Path(out_dir).name}.maxrss"
    t0 = time.perf_counter()
    proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", str(peak_file), python, "-c", code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    _out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"bare export failed:\n{err[-3000:]}")
    return wall, int(peak_file.read_text().split()[-1]) * 1024
