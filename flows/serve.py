"""Serve the UI's deployments from this machine (flows/deployments.py): `python -m flows.serve`.
`farm server start` runs it beside the local Prefect server, so "Run" in the UI works on a laptop
with no work pool or worker to set up; in production the same flows run on the build pool."""

from __future__ import annotations


def main() -> None:
    import os

    from farm.ops.bootstrap import setup_prefect
    from farm.settings import get_settings

    # An entry point: Prefect's settings go into this process's environment. PREFECT_API_URL is
    # set by farm/ops/server.py, which starts this process: it never starts a server itself.
    setup_prefect(get_settings(), os.environ, live=False, start_server=False)
    from prefect import serve

    from flows.deployments import served

    serve(*served(), print_starting_message=False)


if __name__ == "__main__":
    main()
