"""The correctness gates, one module per gate (see registry.py); this package's face."""

from farm.gates.registry import GATES, ROLES, GateRequest, GateSpec, gate_names, for_sibling, of_kind, select

__all__ = ["GATES", "ROLES", "GateRequest", "GateSpec", "gate_names", "for_sibling", "of_kind", "select"]
