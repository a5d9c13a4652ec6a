"""The one way the farm turns a value (a config, a request, a cache key's parts) into a sha256.

A leaf: it imports nothing of the farm, so every module can use it without tying itself to the
module that happens to define configs."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def digest(obj: Any) -> str:
    """sha256 of canonical JSON (sorted keys, no spaces; anything else by str())."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
