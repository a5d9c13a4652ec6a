"""The correctness gates, one module per gate (see registry.py); this package's face."""

from farm.gates.registry import GATES, ROLES, GateRequest, GateSpec, gate_names, of_kind, select

__all__ = ["GATES", "ROLES", "GateRequest", "GateSpec", "gate_names", "of_kind", "select"]
