"""How long-running work reports progress: a callable that takes one line of text.

A leaf (nothing of the farm): stages, gates, the toolchain client and the rebuild all take a
`Progress`; the Prefect tasks pass the run logger's debug, the CLI and plain calls stderr."""

from __future__ import annotations

import sys
from typing import Callable

Progress = Callable[[str], None]


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
