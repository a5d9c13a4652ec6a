"""Each toolchain command's request and result, declared once and checked on both sides of the wire.

The orchestrator (farm/toolchain.py `Toolchain.call`) checks a request before it is sent and the
result when it comes back; the toolchain (farm_toolchain/commands.py) checks the request before its
handler runs and the result before it is written. A request that does not match is bad input on the
side that finds it (`<command> request: <field>: <why>`); a result that does not match is the
toolchain breaking its word (`<command> result: …`), a failure, never a silent KeyError three
modules later.

What is declared is the contract the other side relies on: the fields a handler requires, the types
it reads them as, the fields every result carries. The models check, they do not convert: the dict
that was checked is the dict that travels (a quantizer recipe must arrive byte for byte as sent).
Extra fields are allowed everywhere: the envelope adds `peak_rss_bytes` to every reply, the client
`_seconds`, a gate its own evidence, and a request may carry what only some handlers read. Where a
handler is stricter than its model (a folder that must exist, a regex that must compile, a strict
bool), the handler still says so in its own words. The field-by-field reasons are in each
command's module docstring (farm_toolchain/<command>.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from farm_common.wire import BadInput


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Open(_Wire):
    """A request whose fields the handler ignores (versions, export_options)."""


# --- export (farm_toolchain/export.py) --------------------------------------------------------------


class ExportRequest(_Wire):
    model_dir: str
    output_dir: str
    prefill_lengths: list[int] | int = [8]
    cache_length: int = 64
    options: dict[str, Any] | None = None
    source_grid: bool = False
    weights_once: bool = True
    vision: bool = False
    normalize_in_graph: bool = True


class Signature(_Wire):
    inputs: list[str]
    outputs: list[str]


class ExportResult(_Wire):
    tflite_path: str
    signatures: dict[str, Signature]
    seconds: float
    source_grid: dict[str, Any] | None = None  # with source_grid only
    parts: dict[str, str] | None = None  # with vision only
    image: dict[str, Any] | None = None  # with vision only


class ExportOptionsResult(_Wire):
    litert_torch: str = Field(alias="litert-torch")
    options: dict[str, str]


# --- quantize, check_recipe (farm_toolchain/quantize.py) -------------------------------------------


class RecipeEntry(_Wire):
    regex: str
    operation: str
    algorithm_key: str
    op_config: dict[str, Any] | None = None


class Rule(_Wire):
    name: str
    regex: str
    operation: str = "*"
    algorithm_key: str | None = None
    op_config: dict[str, Any] | None = None
    expected_bits: int | None = None


class Calibration(_Wire):
    text_path: str
    tokenizer_path: str
    samples: int
    max_tokens: int
    steps: str | None = None
    generate: int = 8


class QuantizeRequest(_Wire):
    input_path: str
    output_path: str
    recipe: list[RecipeEntry]
    rules: list[Rule] | None = None
    calibration: Calibration | None = None  # static recipes only (the handler says when it is missing)


class RuleResult(_Wire):
    name: str
    matched_scopes: int
    matched_ops: int
    as_expected: int
    read_back: dict[str, int]


class QuantizeResult(_Wire):
    output_path: str
    rules: list[RuleResult]
    quantized_ops: dict[str, int]
    float_ops: dict[str, int]
    rotation_ops: int
    params: int
    weight_bytes: int
    input_bytes: int
    output_bytes: int
    calibration_samples: int
    seconds: float


class CheckRecipeRequest(_Wire):
    recipe: list[dict[str, Any]]


class CheckRecipeResult(_Wire):
    accepted: bool
    errors: list[str]


# --- package (farm_toolchain/package.py) -----------------------------------------------------------


class Craft(_Wire):
    model_config = ConfigDict(extra="forbid")  # the handler takes exactly these (tests' negative controls)
    stop_tokens: list[int | list[int] | str] | None = None
    chat_template: str | None = None
    drop_executor_metadata: bool | None = None
    llm_model_type: str | None = None


class PackageRequest(_Wire):
    model_dir: str
    tflite_path: str
    output_path: str
    prefill_lengths: list[int] | int
    cache_length: int
    reproducible_seed: str
    creation_timestamp: str | None = None
    end_of_turn: str | None = None
    llm_model_type: str | None = None
    parts: dict[Literal["embedder", "vision_encoder", "vision_adapter"], str] | None = None
    image: dict[str, Any] | None = None  # height and width, when parts has a vision encoder
    craft: Craft | None = None


class Section(_Wire):
    type: str
    offset: int
    size: int


class PackageResult(_Wire):
    output_path: str
    stop_tokens: list[int | list[int] | str]
    start_token: int | list[int] | str | None
    end_of_turn: dict[str, Any] | None
    has_executor_metadata: bool
    uuid: str
    creation_timestamp: str
    sections: list[Section]
    llm_model_type: str | None
    fixes: list[str]
    seconds: float


# --- gate, cpu_view (farm_toolchain/gate.py, cpu_view.py) -----------------------------------------


class GateRequest(_Wire):
    """The envelope every gate's request has; each gate's own fields are its contract module's
    (farm_common/gates/<gate>.py)."""

    gate: str
    cpu: dict[str, Any] | None = None  # a presentation (farm_common/presentation.py); None: this host's class


class CpuSeen(_Wire):
    arch: str
    features: list[str]
    key: str
    label: str
    host: str
    how: str


class RuntimeSeen(_Wire):
    package: str
    version: str


class GateAnswer(_Wire):
    """What every gate measurement answers (farm_toolchain/gates/common.py `result`, gate.py)."""

    status: Literal["pass", "warn", "fail", "skipped"]  # wire.MEASURED: could_not_run is the orchestrator's
    metrics: dict[str, int | float | bool | None]
    evidence: list[str]
    findings: list[str]
    runtime: RuntimeSeen
    backend: str
    cpu: CpuSeen
    replies: list[dict[str, Any]] | None = None


class CpuViewRequest(_Wire):
    cpu: dict[str, Any] | None = None


class CpuViewResult(_Wire):
    cpu: CpuSeen


# --- sensitivity (farm_toolchain/sensitivity.py) ---------------------------------------------------


class Pattern(_Wire):
    name: str
    op: str
    regex: str


class SensitivityRequest(_Wire):
    float_path: str
    patterns: list[Pattern]
    groups_only: bool = False
    model_dir: str | None = None  # required unless groups_only (the handler says so)
    text_path: str | None = None
    positions: int = 2048
    window: int = 512
    interpreter_positions: int = 32
    prefill_length: int = 8
    treatments: list[dict[str, Any]] | None = None
    candidates: list[dict[str, Any]] | None = None
    calibration: dict[str, Any] | None = None
    source_grid: dict[str, Any] | None = None
    only_groups: list[str] | None = None
    work_dir: str | None = None


class SensitivityResult(_Wire):
    groups: list[dict[str, Any]]
    params: int
    weight_bytes: int
    ungrouped: list[dict[str, Any]]


# --- sources: make_model, import_gguf, fetch_hf, hub_info (farm_toolchain/…) ----------------------


class MakeModelRequest(_Wire):
    family: str
    spec: dict[str, Any]
    output_dir: str
    config: dict[str, Any] | None = None
    seed: int = 0
    tokenizer: dict[str, Any] | None = None
    weights_grid: Literal["q4_1"] | None = None


class ModelFolder(_Wire):
    output_dir: str
    files: list[str]
    params: int
    architecture: str


class PackageFile(_Wire):
    package: str
    file: str


class ImportGgufRequest(_Wire):
    output_dir: str
    gguf_path: str | None = None  # exactly one of gguf_path and package_file (the handler says so)
    package_file: PackageFile | None = None
    assemble_dir: str | None = None


class ImportGgufResult(ModelFolder):
    gguf_path: str
    gguf_sha256: str
    gguf_size: int
    tokenizer_pre: str | None
    patches: list[str]
    package: dict[str, Any] | None


class FetchHfRequest(_Wire):
    repo_id: str
    revision: str | None = None
    cache_dir: str | None = None


class FetchHfResult(_Wire):
    model_dir: str
    revision: str


class HubInfoRequest(_Wire):
    repo_id: str
    revision: str | None = None


class HubInfoResult(_Wire):
    """Online: `answer` (the hub's model info) and `config`; offline: only `offline`, the reason."""

    answer: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    offline: str | None = None


class HubUploadRequest(_Wire):
    folder: str
    repo_id: str
    message: str | None = None
    dry_run: bool | None = None
    managed: list[str] | None = None


class HubUploadResult(_Wire):
    add: list[str]
    update: list[str]
    delete: list[str]
    unchanged: list[str]
    commit: str | None
    commit_url: str | None


class VersionsResult(_Wire):
    python: str
    packages: dict[str, str | None]
    freeze: str
    freeze_sha256: str


#: command -> (its request's model, its result's model)
CONTRACTS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "export": (ExportRequest, ExportResult),
    "export_options": (_Open, ExportOptionsResult),
    "quantize": (QuantizeRequest, QuantizeResult),
    "check_recipe": (CheckRecipeRequest, CheckRecipeResult),
    "package": (PackageRequest, PackageResult),
    "gate": (GateRequest, GateAnswer),
    "cpu_view": (CpuViewRequest, CpuViewResult),
    "sensitivity": (SensitivityRequest, SensitivityResult),
    "make_model": (MakeModelRequest, ModelFolder),
    "import_gguf": (ImportGgufRequest, ImportGgufResult),
    "fetch_hf": (FetchHfRequest, FetchHfResult),
    "hub_info": (HubInfoRequest, HubInfoResult),
    "hub_upload": (HubUploadRequest, HubUploadResult),
    "versions": (_Open, VersionsResult),
}


class BadResult(Exception):
    """A command's result does not match its declared contract: the toolchain's fault, not the input's."""


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(the whole object)"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {err['msg']}{more}"


def check_request(command: str, request: Any) -> None:
    """BadInput naming the first field of `request` that breaks `command`'s contract."""
    model = CONTRACTS[command][0] if command in CONTRACTS else None
    if model is None:
        return
    if not isinstance(request, dict):
        raise BadInput(f"{command} request: must be a JSON object, got {type(request).__name__}")
    try:
        model.model_validate(request)
    except ValidationError as exc:
        raise BadInput(f"{command} request: {_first_error(exc)}") from None


def check_result(command: str, result: Any) -> None:
    """BadResult naming the first field of `result` that breaks `command`'s contract."""
    model = CONTRACTS[command][1] if command in CONTRACTS else None
    if model is None:
        return
    try:
        model.model_validate(result)
    except ValidationError as exc:
        raise BadResult(f"{command} result: {_first_error(exc)}") from None
