"""Every gate's contract, one module per gate (see registry.py); this package's face."""

from farm_common.gates.registry import (GATES, ROLES, GateParams, GateRequest, GateSpec, NoParams, for_sibling,
                                        gate_names, of_kind, one_line, parse, select)

__all__ = ["GATES", "ROLES", "GateParams", "GateRequest", "GateSpec", "NoParams", "for_sibling", "gate_names",
           "of_kind", "one_line", "parse", "select"]
