"""Which gates run on a build and with what settings: the `gates:` section of a build config."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from farm_common.gates.registry import GATES, GateSpec, gate_names
from farm_common.gates.registry import GateParams, one_line


class GateConfig(BaseModel):
    """In YAML every key but `skip` names a gate and holds that gate's settings, validated by the
    gate's own model (farm_common/gates/): an unknown gate, an unknown key or a wrong type
    is bad input before anything runs. Optional gates (a question set, arithmetic) run only when
    their section is given.

        gates:
          skip: [prompt_lengths]
          generation_parity: {prompts: ["What is the capital of France?"], max_tokens: 24}
          state_isolation: {known_difference: "recurrent state is not reset between conversations"}
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    skip: list[str] = Field(default_factory=list)
    # gate name -> the settings given for it (defaults are the gate's; see params_for)
    params: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _gate_sections(cls, raw: Any) -> Any:
        """The YAML form (one key per gate) -> {skip, params}; the recorded form passes through."""
        if not isinstance(raw, dict):
            return raw
        out = {"skip": raw.get("skip", []), "params": dict(raw.get("params") or {})}
        for key, value in raw.items():
            if key in ("skip", "params"):
                continue
            out["params"][key] = {} if value is None else value
        return out

    @model_validator(mode="after")
    def _known_and_valid(self) -> "GateConfig":
        unknown = [n for n in [*self.skip, *self.params] if n not in GATES]
        if unknown:
            raise ValueError(f"unknown gate {unknown[0]!r}: gates are {', '.join(gate_names())}")
        for name, given in self.params.items():
            if not isinstance(given, dict):
                raise ValueError(f"{name}: a gate's settings are a mapping, got {type(given).__name__}")
            try:
                GATES.get(name).params.model_validate(given)
            except ValidationError as exc:
                raise ValueError(one_line(exc, prefix=name)) from None
        return self

    def params_for(self, gate: str | GateSpec) -> GateParams:
        """The gate's validated settings: its defaults under what the config gives."""
        spec = gate if isinstance(gate, GateSpec) else GATES.get(gate)
        return spec.params.model_validate(self.params.get(spec.name, {}))

    def with_defaults(self, settings: dict[str, dict[str, Any]]) -> "GateConfig":
        """This config with `settings` ({gate: {setting: value}}, a recipe's allowances) under what it
        gives itself: the config's own values win. An optional gate the config does not enable stays
        off (a default is not a request to run it)."""
        params = {k: dict(v) for k, v in self.params.items()}
        for gate, values in settings.items():
            spec = GATES.get(gate)
            if gate in self.skip or (spec.optional and gate not in params):
                continue
            known = {k: v for k, v in values.items() if k in spec.params.model_fields}
            params[gate] = {**known, **params.get(gate, {})}
        return GateConfig(skip=list(self.skip), params=params)

    def enables(self, name: str) -> bool:
        """An optional gate runs when the config has a section for it."""
        return name in self.params
