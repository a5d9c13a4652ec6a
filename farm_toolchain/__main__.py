"""Dispatch: python -m farm_toolchain <command>. Each command module has `handle(request) -> dict`.

Modules are imported lazily so that `versions` does not pay for importing torch.
"""

import importlib
import sys

from farm_toolchain import protocol

COMMANDS = {
    "versions": "farm_toolchain.versions",
    "make_model": "farm_toolchain.make_model",
    "fetch_hf": "farm_toolchain.fetch_hf",
    "export": "farm_toolchain.export",
    "quantize": "farm_toolchain.quantize",
    "package": "farm_toolchain.package",
}


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m farm_toolchain {{{'|'.join(COMMANDS)}}} < request.json", file=sys.stderr)
        sys.exit(2)
    module = importlib.import_module(COMMANDS[sys.argv[1]])
    protocol.run(module.handle)


if __name__ == "__main__":
    main()
