"""The one way an extension point registers its units and finds them.

An extension point is a package with one module per unit (a family, a gate, a runner, a refusal,
a card check, a toolchain command). Each unit registers itself where it is defined:

    FAMILIES = Registry("family", "farm.families", support=("base",))

    @FAMILIES.register("llama", ...)          # in farm/families/llama.py
    class Llama(Family): ...

and `FAMILIES.load()` imports every module of the package once (pkgutil) and returns the units by
name, in their declared `order` (then by name). Adding a unit is one new module: nothing else lists
it. A module that registers nothing must be declared as `support` (a base class, helpers): a unit
module that forgot its decorator is an error at load, not a unit that silently never runs.

`register(name, **attrs)` hands the decorated object and attrs to the registry's `make` (default:
keep the object as it is), so each extension point decides what a unit is (a spec around a
function, an instance of a class) while registering and discovery stay the same everywhere.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any, Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class UnknownUnit(LookupError):
    """A name no unit of this extension point is registered under."""


def _keep(name: str, obj: Any, attrs: dict[str, Any]) -> Any:
    if attrs:
        raise TypeError(f"{name}: this registry takes no attributes ({', '.join(attrs)})")
    return obj


class Registry(Generic[T]):
    def __init__(self, kind: str, package: str, *, make: Callable[[str, Any, dict[str, Any]], T] = _keep,
                 order: Callable[[T], Any] | None = None, support: tuple[str, ...] = (),
                 error: Callable[[str], Exception] = UnknownUnit, plural: str | None = None):
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self.package = package
        self._make = make
        self._order = order
        self._support = frozenset(support)
        self._error = error
        self._units: dict[str, T] = {}
        self._by_module: dict[str, list[str]] = {}
        self._loaded: dict[str, T] | None = None

    def register(self, name: str, **attrs: Any) -> Callable[[Any], Any]:
        """Register the decorated object as the unit `name` (returned unchanged)."""

        def decorate(obj: Any) -> Any:
            if name in self._units:
                raise RuntimeError(f"{self.kind} {name!r} is registered twice")
            self._units[name] = self._make(name, obj, attrs)
            # Credited to the module whose body registers it (the object may be made elsewhere).
            registering = sys._getframe(1).f_globals.get("__name__", "?")
            self._by_module.setdefault(registering, []).append(name)
            self._loaded = None
            return obj

        return decorate

    def load(self) -> dict[str, T]:
        """Every unit of the package, imported once: name -> unit, in order."""
        if self._loaded is None:
            pkg = importlib.import_module(self.package)
            for info in pkgutil.iter_modules(pkg.__path__):
                if info.name.startswith("_") or info.ispkg:
                    continue
                module = f"{self.package}.{info.name}"
                importlib.import_module(module)
                if info.name not in self._support and not self._by_module.get(module):
                    raise RuntimeError(f"{module} registers no {self.kind}: register one, or declare it "
                                       f"support of the {self.kind} registry")
            units = list(self._units.items())
            key = (lambda kv: (self._order(kv[1]), kv[0])) if self._order else (lambda kv: kv[0])
            self._loaded = dict(sorted(units, key=key))
        return self._loaded

    def get(self, name: str) -> T:
        units = self.load()
        if name not in units:
            known = ", ".join(units) or "none"
            raise self._error(f"unknown {self.kind} {name!r}: the {self.plural} are {known}")
        return units[name]

    def names(self) -> list[str]:
        return list(self.load())

    def __contains__(self, name: object) -> bool:
        return name in self.load()

    def __iter__(self) -> Iterator[T]:
        return iter(self.load().values())

    def __len__(self) -> int:
        return len(self.load())
