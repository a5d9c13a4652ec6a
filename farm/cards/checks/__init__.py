"""Mechanical checks before a card is published, one module per check (see base.py); this
package's face."""

from farm.cards.checks.base import CARD_CHECKS, run_checks

__all__ = ["CARD_CHECKS", "run_checks"]
