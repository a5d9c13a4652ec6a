"""litertlm-farm: the orchestrator side (no torch here; see farm_toolchain for the toolchain side)."""

__version__ = "0.1.0"
