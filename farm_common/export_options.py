"""Whether an export option's value fits the type litert-torch declares for it.

The toolchain reads the installed litert-torch's own annotations (`export()`'s keyword parameters and
`ExportableModuleConfig`'s fields, as source text: farm_toolchain/export.py `options_schema`); both
environments check a value against such an annotation here, so a config's `export.options` is bad
input before any work (farm/stages/convert.py) and a direct toolchain request is checked the same
way. `use_fused_gdn: "sometimes"` was built and stored before (issue 19).

Annotations are read as Python expressions: `bool`, `int`, `float`, `str`, `None`, `Any`, `X | Y`,
`Optional[X]`, `Union[...]`, `list[X]`, `tuple[X, ...]`, `dict[K, V]`, `Literal[...]`. A name the
checker does not know (an enum class such as `ExportTask`) accepts a string or anything it cannot
judge: the check refuses what is certainly wrong, never what might be right."""

from __future__ import annotations

import ast
from typing import Any

_SIMPLE = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,)}


def problem(value: Any, annotation: str) -> str | None:
    """None when `value` fits `annotation`, else what it should be ("bool", "list[int]", ...)."""
    try:
        node = ast.parse(annotation, mode="eval").body
    except SyntaxError:
        return None  # an annotation this checker cannot read judges nothing
    return None if _fits(value, node) else annotation


def _fits(value: Any, node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _fits(value, node.left) or _fits(value, node.right)
    if isinstance(node, ast.Constant):
        return value is None if node.value is None else value == node.value
    if isinstance(node, ast.Attribute):  # typing.Any, enum.Member: not judged
        return True
    if isinstance(node, ast.Name):
        if node.id == "None":
            return value is None
        if node.id == "Any":
            return True
        if node.id in _SIMPLE:
            kinds = _SIMPLE[node.id]
            # bool is an int in Python; an int option given true/false is a mistake, and so is the reverse
            return isinstance(value, kinds) and (node.id == "bool") == isinstance(value, bool)
        if node.id in ("list", "tuple"):
            return isinstance(value, (list, tuple))
        if node.id == "dict":
            return isinstance(value, dict)
        return True  # a class the checker does not know
    if isinstance(node, ast.Subscript):
        base = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base in ("Optional",):
            return value is None or _fits(value, args[0])
        if base == "Union":
            return any(_fits(value, a) for a in args)
        if base == "Literal":
            return any(isinstance(a, ast.Constant) and value == a.value and type(value) is type(a.value) for a in args)
        if base in ("list", "List", "Sequence", "tuple", "Tuple"):
            if not isinstance(value, (list, tuple)):
                return False
            item = args[0]
            return all(_fits(v, item) for v in value)
        if base in ("dict", "Dict", "Mapping"):
            return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items()) \
                if len(args) == 2 else isinstance(value, dict)
        return True
    return True


def check(options: dict[str, Any], schema: dict[str, str], where: str = "litert-torch") -> str | None:
    """The first option that is unknown to the schema or of the wrong type, as a one-line reason
    (None: every option fits)."""
    for name, value in options.items():
        if name not in schema:
            near = sorted(k for k in schema if k.split("_")[0] == name.split("_")[0])[:4]
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            return f"export option {name!r} is not one {where} takes{hint}"
        want = problem(value, schema[name])
        if want is not None:
            return f"export option {name}: {value!r} is not {want} ({where} declares {name}: {schema[name]})"
    return None
