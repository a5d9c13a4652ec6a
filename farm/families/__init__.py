"""Model families, one module per family (see base.py); this package's face."""

from farm.families.base import (FAMILIES, Family, KnownFailure, check_architecture, family_architectures,
                                family_names, family_of, get_family)

__all__ = ["FAMILIES", "Family", "KnownFailure", "check_architecture", "family_architectures", "family_names",
           "family_of", "get_family"]
