"""A Hugging Face source end to end, without the network: the toolchain's real `huggingface_hub`
client (`hub_info`, `fetch_hf`) against a hub on 127.0.0.1 (tests/hub_replay.py, HF_ENDPOINT).
A repository that passes every refusal is fetched (only the files the export needs) and recorded
with its commit; a gated, remote-code or pre-quantized one is refused by `farm build` before a
weight is downloaded: one line, exit 2, `--json` gives the refusal, nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from farmtest import farm_env, run_farm
from farmtest.hub_replay import HubReplay, Repo

from farm.config import load_config
from farm.resources import Resources
from farm.settings import Settings
import farmtest


pytestmark = pytest.mark.slow  # the toolchain env's huggingface_hub

HUB = farmtest.DATA / "hub"


@pytest.fixture(autouse=True)
def _online(monkeypatch):
    """The hub replay is the network here: importing farm_toolchain's gate, export or package
    modules (other tests do, in this process) sets HF_HUB_OFFLINE=1 in os.environ, which the
    toolchain server and the CLI would inherit, and huggingface_hub would never ask the replay."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
SHA = "5f3a1c0e9b8d7a6f5e4d3c2b1a09f8e7d6c5b4a3"


def _model_folder(tmp_path: Path) -> Path:
    d = tmp_path / "served"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "torch_dtype": "float32",
                                               "eos_token_id": 2, "model_type": "llama"}))
    (d / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {}, "merges": []},
                                                  "added_tokens": []}))
    (d / "model.safetensors").write_bytes(b"\0" * 4096)
    # What a repository also holds and the export does not need: never downloaded.
    (d / "README.md").write_text("# a model card\n")
    (d / "pytorch_model.bin").write_bytes(b"\1" * 2048)
    return d


def _recorded(name: str, with_config: bool = True) -> Repo:
    answer = json.loads((HUB / f"{name}-model-info.json").read_text())
    files = {"config.json": (HUB / f"{name}-config.json").read_bytes()} if with_config else {}
    return Repo(answer, files=files)


def _config(tmp_path: Path, repo_id: str, revision: str, family: str) -> Path:
    cfg = tmp_path / f"{repo_id.replace('/', '_')}.yaml"
    cfg.write_text(f"name: hub-model\nfamily: {family}\nsource: {{kind: hf, repo_id: {repo_id}, revision: {revision}}}\n"
                   "export: {prefill_lengths: [8], cache_length: 64}\n")
    return cfg


def test_a_hub_repository_is_fetched_recorded_and_only_what_the_export_needs(tmp_path, toolchain_python, monkeypatch):
    folder = _model_folder(tmp_path)
    with HubReplay({"farm-test/tiny-llama": Repo.from_folder("farm-test/tiny-llama", folder, sha=SHA)}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)  # the toolchain server inherits it as it starts
        monkeypatch.delenv("HF_TOKEN", raising=False)
        res = Resources(Settings(home=tmp_path / "home", cache=tmp_path / "cache", toolchain_python=toolchain_python))
        try:
            info = res.toolchain.call("hub_info", {"repo_id": "farm-test/tiny-llama", "revision": SHA,
                                                   "cache_dir": str(tmp_path / "cache" / "hf")})
            assert info["answer"]["id"] == "farm-test/tiny-llama" and info["answer"]["sha"] == SHA
            sizes = {s["rfilename"]: s["size"] for s in info["answer"]["siblings"]}
            assert sizes["model.safetensors"] == 4096 and sizes["pytorch_model.bin"] == 2048
            assert info["config"]["architectures"] == ["LlamaForCausalLM"]

            from farm.stages.source import resolve_source

            cfg = load_config(_config(tmp_path, "farm-test/tiny-llama", SHA, "llama"))
            src = resolve_source(res, cfg, progress=lambda _l: None)
        finally:
            res.toolchain.close()
    snapshot = Path(src.model_dir)
    assert snapshot.name == SHA  # huggingface_hub's snapshot folder, named by the commit
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert (snapshot / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    assert "README.md" not in hub.downloads() and "pytorch_model.bin" not in hub.downloads()
    from farm.lineage.queries.artifacts import lineage

    with res.db.session() as s:
        rec = lineage(s, src.tokenizer.sha256)["source"]  # the tokenizer artifact names its source
    assert rec["id"] == src.source_id and rec["repo_id"] == "farm-test/tiny-llama" and rec["revision"] == SHA
    assert {f["path"] for f in rec["files"]} == {"config.json", "model.safetensors", "tokenizer.json"}


def test_a_listing_that_fails_after_hub_info_is_an_error_not_a_config_only_snapshot(tmp_path, toolchain_python,
                                                                                   monkeypatch):
    """hub_info reads config.json; had it cached it in the snapshot folder, snapshot_download, its
    listing failing, returned that folder as the whole snapshot (huggingface_hub cannot tell a
    partial folder without a cached listing): the build then saw a repository with no weights."""
    from farm.errors import BadInput

    repo = Repo.from_folder("farm-test/tiny-llama", _model_folder(tmp_path), sha=SHA)
    repo.listing_down = True
    with HubReplay({"farm-test/tiny-llama": repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        res = Resources(Settings(home=tmp_path / "home", cache=tmp_path / "cache", toolchain_python=toolchain_python))
        request = {"repo_id": "farm-test/tiny-llama", "revision": SHA, "cache_dir": str(tmp_path / "cache" / "hf")}
        try:
            assert res.toolchain.call("hub_info", request)["config"]["architectures"] == ["LlamaForCausalLM"]
            with pytest.raises(BadInput) as exc:
                res.toolchain.call("fetch_hf", request)
        finally:
            res.toolchain.close()
    assert "unreachable" in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "cache" / "hf" / "models--farm-test--tiny-llama" / "snapshots" / SHA).exists()


@pytest.mark.parametrize("name, family, reason, detail", [
    ("gated", "gemma3", "gated", "google/gemma-3-270m"),
    ("remote-code", "llama", "remote_code", "never executes"),
    ("gptq", "llama", "pre_quantized", "'gptq'"),
])
def test_a_refused_hub_repository_is_refused_before_any_weight_is_downloaded(tmp_path, prefect_server, name, family,
                                                                            reason, detail):
    repo = _recorded(name)
    repo_id = repo.answer["id"]
    with HubReplay({repo_id: repo}) as hub:
        home = tmp_path / "home"
        # The session's Prefect server, not a temporary one per command (~12 s of each case).
        env = farm_env(home, prefect_server, HF_ENDPOINT=hub.url)
        env.pop("HF_TOKEN", None)
        env.pop("HF_HUB_OFFLINE", None)
        env.pop("HUGGING_FACE_HUB_TOKEN", None)
        proc = run_farm(["build", str(_config(tmp_path, repo_id, repo.answer["sha"], family)), "--json"], env,
                        timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["refused"]["reason"] == reason and detail in out["refused"]["detail"], out
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: refused ({reason}): ") and "Traceback" not in proc.stderr
    # The metadata was asked for; no weight was sent (at most config.json, which a gated repo denies).
    assert any(path.startswith(f"/api/models/{repo_id}") for _m, path, _s in hub.requests)
    assert set(hub.downloads()) <= {"config.json"}, hub.requests
    assert not (home / "store").exists() or not any(p.is_file() for p in (home / "store").rglob("*"))


def test_negative_control_the_same_gated_repository_with_a_token_is_not_refused_as_gated(tmp_path, toolchain_python,
                                                                                        monkeypatch):
    """With HF_TOKEN the gate opens (the replay answers config.json only to a request carrying a
    token): the refusals pass, so `gated` above is the token's absence, not the answer's shape."""
    from farm.families import family_architectures
    from farm.refusals import check_source, hub_facts

    repo = _recorded("gated")
    with HubReplay({repo.answer["id"]: repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", "hf_test_token")
        res = Resources(Settings(home=tmp_path / "home", cache=tmp_path / "cache", toolchain_python=toolchain_python))
        try:
            info = res.toolchain.call("hub_info", {"repo_id": repo.answer["id"], "revision": repo.answer["sha"]})
        finally:
            res.toolchain.close()
    assert info["answer"]["gated"] == "manual" and info["config"]["architectures"] == ["Gemma3ForCausalLM"]
    assert hub.downloads() == ["config.json"]
    check_source(hub_facts(info["answer"], info["config"], family_architectures()))


def _served_tiny_llama(tmp_path: Path, toolchain_python: str) -> Path:
    """The tiny Llama's real weights and tokenizer (examples/tiny-llama.yaml's generated source, made
    once in FARM_CACHE) copied to a folder the replay serves as a hub repository."""
    import shutil

    from farm.stages.source import _materialize_generated

    tiny = load_config(farmtest.REPO / "examples" / "tiny-llama.yaml")
    res = Resources(Settings(home=tmp_path / "gen-home", toolchain_python=toolchain_python))
    try:
        made, _ = _materialize_generated(res, tiny.source, lambda _l: None)
    finally:
        res.toolchain.close()
    served = tmp_path / "served"
    shutil.copytree(made, served, ignore=shutil.ignore_patterns(".*"))
    return served


def test_farm_build_hub_takes_the_family_and_commit_from_the_hub_and_builds(tmp_path, prefect_server,
                                                                           toolchain_python):
    """`farm build --hub REPO@REV` (issue 18, item 3): no config written by hand. The tiny Llama's
    real weights served by the replay under a branch name: the config kept in FARM_HOME/configs/
    names family llama (from config.json) and the commit the hub answered; the bundle's source is
    that repository at that commit."""
    served = _served_tiny_llama(tmp_path, toolchain_python)
    with HubReplay({"farm-test/tiny-llama": Repo.from_folder("farm-test/tiny-llama", served, sha=SHA)}) as hub:
        home = tmp_path / "home"
        env = farm_env(home, prefect_server, HF_ENDPOINT=hub.url)
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
            env.pop(name, None)
        proc = run_farm(["build", "--hub", "farm-test/tiny-llama@main", "--no-gates", "--json"], env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = yaml.safe_load((home / "configs" / "tiny-llama.yaml").read_text())
    assert written == {"name": "tiny-llama", "family": "llama",
                       "source": {"kind": "hf", "repo_id": "farm-test/tiny-llama", "revision": SHA}}
    sha = json.loads(proc.stdout)["artifact"]["sha256"]
    rec = json.loads(run_farm(["lineage", sha, "--json"], env).stdout)
    assert rec["source"]["kind"] == "hf" and rec["source"]["repo_id"] == "farm-test/tiny-llama"
    assert rec["source"]["revision"] == SHA and rec["recipe"]["name"] == "dynamic_wi8_afp32"


def test_farm_build_hub_of_a_refused_repository_writes_no_config(tmp_path, prefect_server):
    """The negative control: a repository the refusals stop (remote code) is refused from the hub's
    answer, before a weight is downloaded and before a config is written."""
    repo = _recorded("remote-code")
    with HubReplay({repo.answer["id"]: repo}) as hub:
        home = tmp_path / "home"
        env = farm_env(home, prefect_server, HF_ENDPOINT=hub.url)
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
            env.pop(name, None)
        proc = run_farm(["build", "--hub", repo.answer["id"]], env, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "error: refused (remote_code)" in proc.stderr and "Traceback" not in proc.stderr
    assert not (home / "configs").exists() and set(hub.downloads()) <= {"config.json"}


def test_the_ui_hub_form_builds_a_repository_and_refuses_one_in_the_runs_state(tmp_path, toolchain_python):
    """The Prefect UI's `build-hub` form (issue 18, item 4), as its Run button posts it, against the
    served runner of `farm server start`: a repository id and a branch build (the config kept in
    FARM_HOME/configs/, where the `build` form's dropdown finds it once the runner restarts), and a
    remote-code repository ends Failed with the refusal as the run's state message, no weight
    downloaded."""
    import time

    import httpx
    from farmtest import free_port, wait_for_flow_run

    served = _served_tiny_llama(tmp_path, toolchain_python)
    refused = _recorded("remote-code")
    repos = {"farm-test/tiny-llama": Repo.from_folder("farm-test/tiny-llama", served, sha=SHA),
             refused.answer["id"]: refused}
    with HubReplay(repos) as hub:
        home = tmp_path / "home"
        env = {k: v for k, v in farm_env(home, HF_ENDPOINT=hub.url).items()
               if k not in ("FARM_PREFECT_SERVER", "HF_TOKEN", "HF_HUB_OFFLINE", "HUGGING_FACE_HUB_TOKEN")}
        env["FARM_PREFECT_PORT"] = str(free_port())
        try:
            started = run_farm(["server", "start", "--json"], env)
            assert started.returncode == 0, started.stderr
            api = json.loads(started.stdout)["api_url"]
            deadline = time.monotonic() + 120
            while (r := httpx.get(f"{api}/deployments/name/build-hub/build-hub", timeout=10)).status_code != 200:
                assert time.monotonic() < deadline, "the served build-hub deployment never appeared"
                time.sleep(1)
            dep = r.json()
            props = dep["parameter_openapi_schema"]
            defs = props.get("definitions") or props.get("$defs")
            assert {"repo_id", "revision", "recipe"} <= set(defs["HubBuildParams"]["properties"])

            def ui_run(params: dict) -> dict:
                run = httpx.post(f"{api}/deployments/{dep['id']}/create_flow_run", timeout=10,
                                 json={"parameters": {"params": params}}).json()
                return wait_for_flow_run(api, run["id"], 600)

            no = ui_run({"repo_id": refused.answer["id"], "revision": "main"})
            assert no["state_type"] == "FAILED" and "refused (remote_code)" in no["state"]["message"], no["state"]
            assert set(hub.downloads()) <= {"config.json"} and not (home / "configs").exists()
            done = ui_run({"repo_id": "farm-test/tiny-llama", "revision": "main", "run_gates": False})
            assert done["state_type"] == "COMPLETED", done["state"]
        finally:
            run_farm(["server", "stop"], env)
    written = yaml.safe_load((home / "configs" / "tiny-llama.yaml").read_text())
    assert written["family"] == "llama" and written["source"]["revision"] == SHA
    arts = json.loads(run_farm(["artifacts", "--kind", "litertlm", "--model", "tiny-llama", "--json"],
                               {**env, "FARM_PREFECT_SERVER": "temporary"}).stdout)
    assert arts["artifacts"], "the UI's hub build recorded no bundle"
