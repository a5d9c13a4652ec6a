"""`versions`: what is installed in this toolchain env. Uses importlib.metadata only (no torch import).

Request: {} (ignored). Result: {"python", "packages": {name: version or null}, "freeze", "freeze_sha256"}.
`freeze` is the sorted `name==version` lines of every installed distribution (names normalized as
in PEP 503), so two envs with the same freeze_sha256 hold the same packages.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import platform
import re
from typing import Any

from farm_toolchain.commands import COMMANDS

KEY_PACKAGES = (
    "torch",
    "litert-torch",
    "litert-lm",
    "litert-lm-api",
    "litert-lm-builder",
    "ai-edge-quantizer",
    "ai-edge-litert",
    "litert-converter",
    "transformers",
    "tokenizers",
    "huggingface-hub",
    "numpy",
)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        # First on sys.path wins, as for imports.
        found.setdefault(_normalize(name), dist.version)
    return found


@COMMANDS.register("versions")
def handle(request: dict[str, Any]) -> dict[str, Any]:
    del request
    dists = installed()
    freeze = "".join(f"{name}=={version}\n" for name, version in sorted(dists.items()))
    return {
        "python": platform.python_version(),
        "packages": {name: dists.get(name) for name in KEY_PACKAGES},
        "freeze": freeze,
        "freeze_sha256": hashlib.sha256(freeze.encode()).hexdigest(),
    }
