from __future__ import annotations

from typing import Any, Callable

from prefect import get_run_logger
from prefect.states import Completed, State

from farm.resources import Resources, get_resources


def resources() -> Resources:
    return get_resources()


def progress() -> Callable[[str], None]:
    logger = get_run_logger()
    return logger.info


def finish(result: Any) -> State:
    """Finish the task as "Cached" when the farm's cache answered, so the UI tells runs apart."""
    logger = get_run_logger()
    logger.info("%s %s in %.2fs", result.name, result.status, result.seconds)
    return Completed(data=result, name="Cached" if result.status == "cached" else "Completed")
