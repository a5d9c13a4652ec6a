"""What both environments import (the orchestrator's `farm` and the toolchain's `farm_toolchain`):
the standard library and pydantic only, never prefect, SQLAlchemy, torch or litert.

- `registry`: the one way every extension point registers its units and finds them;
- `wire`: the envelope between the environments, the done marker, BadInput, the gate statuses;
- `gates/`: every gate's contract, one module per gate (settings with their defaults, written once:
  the orchestrator validates a build config's `gates:` section with them, the toolchain reads its
  request with them; the spec, the request builder, the card line);
- `algorithms`: facts about the quantizer's weight algorithms both sides act on (rotations).

`tests/unit/test_boundaries.py` keeps this package free of either side's imports."""
