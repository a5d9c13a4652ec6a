"""What the flows share."""

from __future__ import annotations

from typing import Any


def run_flow(flow: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a flow (or subflow) and return its data. A flow that records a failure (a failed gate)
    ends Failed with its summary as the state's data, which is returned; one that raised re-raises
    its exception here."""
    state = flow(*args, return_state=True, **kwargs)
    data = state.result(raise_on_failure=False)
    if isinstance(data, BaseException):
        raise data
    return data
