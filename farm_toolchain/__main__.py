"""Dispatch: `python -m farm_toolchain <command>` (one-shot) or `python -m farm_toolchain serve`.
Each command module has `handle(request) -> dict` ("module:function" names another handler of a
module that serves several commands); modules are imported lazily so that `versions` does not pay
for importing torch."""

import importlib
import sys

from farm_toolchain import protocol

COMMANDS = {
    "versions": "farm_toolchain.versions",
    "make_model": "farm_toolchain.make_model",
    "fetch_hf": "farm_toolchain.fetch_hf",
    "hub_info": "farm_toolchain.fetch_hf:hub_facts",
    "import_gguf": "farm_toolchain.import_gguf",
    "export": "farm_toolchain.export",
    "quantize": "farm_toolchain.quantize",
    "check_recipe": "farm_toolchain.quantize:check_recipe",
    "package": "farm_toolchain.package",
    # Every gate: {"gate": name, ...}; the measurements register themselves (farm_toolchain/gates/).
    "gate": "farm_toolchain.gates:handle",
}


def resolve(command: str) -> protocol.Handler:
    if command not in COMMANDS:
        raise KeyError(f"unknown command {command!r}; known: {', '.join(COMMANDS)}")
    module, _, attr = COMMANDS[command].partition(":")
    return getattr(importlib.import_module(module), attr or "handle")


def main() -> None:
    if len(sys.argv) == 2 and sys.argv[1] == "serve":
        protocol.serve(resolve)
    if len(sys.argv) != 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m farm_toolchain {{{'|'.join(COMMANDS)}|serve}} < request.json", file=sys.stderr)
        sys.exit(2)
    protocol.run(resolve(sys.argv[1]))


if __name__ == "__main__":
    main()
