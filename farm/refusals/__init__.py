"""Refusals before any work, one module per reason (see base.py); this package's face."""

from farm.refusals.base import (REFUSALS, Refused, SourceFacts, available_memory, check_source, estimated_params,
                                folder_facts, hub_facts, recorded_peak)

__all__ = ["REFUSALS", "Refused", "SourceFacts", "available_memory", "check_source", "estimated_params",
           "folder_facts", "hub_facts", "recorded_peak"]
