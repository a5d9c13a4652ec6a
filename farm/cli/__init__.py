"""`farm`: build bundles and ask where a sha256 came from.

Errors print one line to stderr (no traceback unless --debug): exit 2 for bad input, 1 for a failed
build. Query commands take --json and then print exactly one JSON object on stdout. One module per
command group (building, devices, lineage, admin); what they share is in _common.py."""

from __future__ import annotations

from farm.cli._common import app
from farm.cli import building, devices, lineage, admin  # noqa: E402,F401  (registers the commands)


def main() -> None:
    app()


__all__ = ["app", "main"]
