"""Dispatch: `python -m farm_toolchain <command>` (one-shot) or `python -m farm_toolchain serve`.
The commands register themselves (farm_toolchain/commands.py), one module each."""

import sys

from farm_toolchain import protocol
from farm_toolchain.commands import COMMANDS


def main() -> None:
    if len(sys.argv) == 2 and sys.argv[1] == "serve":
        protocol.serve(COMMANDS.get)
    if len(sys.argv) != 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m farm_toolchain {{{'|'.join(COMMANDS.names())}|serve}} < request.json", file=sys.stderr)
        sys.exit(2)
    command = COMMANDS.get(sys.argv[1])
    protocol.run(command.handle, command.env, command.defaults)


if __name__ == "__main__":
    main()
