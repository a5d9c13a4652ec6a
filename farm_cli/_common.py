"""What every command group shares: the Typer apps, the one-line error guard, JSON output, and the
command's Prefect set-up (farm/prefect_setup.py) with its terminal options."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable

import typer

from farm.errors import BadInput, FarmError
from farm_common import wire
from farm.settings import get_settings

app = typer.Typer(
    help="litertlm-farm: Hugging Face checkpoints -> verified LiteRT-LM bundles, with lineage.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
toolchain_app = typer.Typer(help="The toolchain env (torch, litert-torch, quantizer, builder, runtime).")
app.add_typer(toolchain_app, name="toolchain")
db_app = typer.Typer(help="The lineage database.")
app.add_typer(db_app, name="db")
store_app = typer.Typer(help="The content-addressed artifact store.")
app.add_typer(store_app, name="store")
server_app = typer.Typer(help="The farm's local Prefect server (UI and API), used when PREFECT_API_URL is not set.")
app.add_typer(server_app, name="server")

_state: dict[str, Any] = {"debug": False, "verbose": False, "log": None}


class Terminated(BaseException):
    """SIGTERM, raised where the process is (as SIGINT raises KeyboardInterrupt), so a terminated
    command unwinds like an interrupted one: its leases are released, its Prefect run is ended (the
    flow engine's own SIGTERM bridge marks it Crashed and hands the signal on to this handler), and
    it says so in one line. Without it the default action killed the process silently (exit 143)."""


def on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def json_flag(what: str = "one JSON object") -> Any:
    """The `--json` option every query command has: exactly one JSON object on stdout."""
    return typer.Option(False, "--json", help=f"Print {what}.")


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="Stream every log line (the toolchain's output too) to the terminal."),
) -> None:
    _state["debug"] = debug
    _state["verbose"] = verbose


def _guard(fn: Callable[[], Any], as_json: bool = False) -> Any:
    """Every outcome of a command is one line: the farm's own errors say what is wrong and what to
    do; anything unexpected names what failed and where its full log is (--debug: the traceback).
    With as_json, a refused source is also the one JSON object on stdout ({"refused": {...}})."""
    try:
        return fn()
    except (FarmError, wire.BadInput) as exc:  # wire.BadInput: what the shared contract (farm_common) raises
        if _state["debug"]:
            raise
        from farm.disk import behind
        from farm.refusals import Refused

        # A failure whose cause is a full disk (the lineage DB's "database or disk is full", a
        # toolchain's "No space left on device", or anything while FARM_HOME's disk has no room
        # left) says that, not what it broke.
        if not isinstance(exc, wire.BadInput) and (full := behind(exc, get_settings().home)) is not None:
            exc = full
        if as_json and isinstance(exc, Refused):
            _emit(exc.as_json())
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(getattr(exc, "exit_code", 2)) from None
    except Terminated:
        print("terminated (SIGTERM): stopped; what completed is recorded, nothing half-written is kept", file=sys.stderr)
        raise typer.Exit(128 + signal.SIGTERM) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected failure becomes one line
        if _state["debug"]:
            raise
        from farm.disk import behind

        if (full := behind(exc, get_settings().home)) is not None:
            print(f"error: {full}", file=sys.stderr)
            raise typer.Exit(full.exit_code) from None
        log = _crash_log(exc)
        from farm.ops.server import lost

        if (line := lost(get_settings(), os.environ, exc)) is not None:
            print(f"error: {line} (full log: {log})", file=sys.stderr)
            raise typer.Exit(1) from None
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        print(f"error: unexpected {type(exc).__name__}: {first} (full log: {log}; run with --debug for the "
              "traceback)", file=sys.stderr)
        raise typer.Exit(1) from None


def _crash_log(exc: BaseException) -> str:
    """The traceback and the command line, under FARM_HOME/logs (or the temp dir when FARM_HOME is
    not writable)."""
    import tempfile
    import time
    import traceback

    text = f"farm {' '.join(sys.argv[1:])}\n\n" + "".join(traceback.format_exception(exc))
    name = f"farm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    for folder in (get_settings().home / "logs", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
            return str(folder / name)
        except OSError:
            continue
    return "(no writable folder for a log)"


def _emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def configure_prefect_env(live: bool = True) -> None:
    """Prefect for this command (farm/ops/bootstrap.py), with this command's terminal options, in this
    process's environment (Prefect reads its settings from there)."""
    from farm.ops.bootstrap import setup_prefect

    if _state["log"] is None:
        _state["log"] = setup_prefect(get_settings(), os.environ, live=live and not _state["verbose"],
                                      verbose=_state["verbose"], debug=_state["debug"])


def _log_line() -> None:
    """Where this command's full log is (when it wrote one)."""
    log = _state.get("log")
    if log is not None and log.exists():
        print(f"full log: {log}", file=sys.stderr)
