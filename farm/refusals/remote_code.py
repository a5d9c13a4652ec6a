"""A repository that needs its own Python code to load (auto_map / trust_remote_code): never executed."""

from __future__ import annotations

from farm.refusals.base import REFUSALS, WEIGHT_SUFFIXES, SourceFacts


@REFUSALS.register("remote_code", order=20)
def refuse(f: SourceFacts) -> tuple[str, str] | None:
    auto_map = f.config.get("auto_map")
    py = sorted(n for n in f.files if n.endswith(".py"))
    if auto_map or f.config.get("trust_remote_code"):
        classes = ", ".join(sorted(str(v) for v in (auto_map or {}).values())) or "trust_remote_code"
        return (f"{f.where} needs the repository's own Python code to load ({classes}); the farm never executes "
                "a repository's code",
                "use a revision whose architecture transformers ships (no auto_map), or convert it yourself")
    if py and not any(n.endswith(WEIGHT_SUFFIXES) for n in f.files):
        return (f"{f.where} ships Python files ({', '.join(py[:3])}) and no safetensors weights",
                "use a safetensors revision of the model")
    return None
