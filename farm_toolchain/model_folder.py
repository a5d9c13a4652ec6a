"""Writing a model folder (make_model, import_gguf) so that it appears whole or not at all."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from farm_toolchain import protocol


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Sorted keys and a trailing newline: the same data gives the same bytes."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def same_tree(a: Path, b: Path) -> bool:
    files = listing(a)
    if files != listing(b):
        return False
    return all(filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def publish(out: Path, build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Build into a temporary sibling folder, then rename it onto `out`. An `out` that already holds
    exactly these bytes is left as is (re-running is harmless); any other non-empty `out` is refused."""
    if out.exists() and not out.is_dir():
        raise protocol.BadInput(f"output_dir {out} exists and is not a folder: choose another output_dir")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        info = build(tmp)
        if out.is_dir() and any(out.iterdir()):
            if not same_tree(tmp, out):
                raise protocol.BadInput(
                    f"output_dir {out} is not empty and does not hold this model: "
                    "remove it or choose another output_dir"
                )
            protocol.progress(f"{out} already holds this exact model; left as is")
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it 0700
            if out.is_dir():
                out.rmdir()
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"output_dir": str(out), "files": listing(out), **info}
