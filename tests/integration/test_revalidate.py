"""Re-validation on new litert-lm releases: the index's JSON API read on a loopback index server
(PEP 691), the release delta's labels on crafted results, and (slow) a real re-validation: a file
measured on litert-lm 0.18.0, an index listing 0.18.0 and 0.18.1, every gate and the local CPU
re-run on 0.18.1 in its own runtime env, results per version, the delta recorded and shown."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from farm.errors import BuildFailed
from farm.revalidate import new_releases, previous_release, release_delta, released_versions

RELEASES = {
    "litert-lm": ["0.17.2", "0.18.0", "0.18.1", "0.19.0rc1", "0.16.0"],
    "litert-lm-api": ["0.17.2", "0.18.0", "0.18.1", "0.19.0rc1"],
}


class _Index(BaseHTTPRequestHandler):
    releases = RELEASES
    seen_accept: list[str] = []

    def do_GET(self):  # noqa: N802
        project = self.path.strip("/")
        if project not in self.releases:
            self.send_error(404)
            return
        _Index.seen_accept.append(self.headers.get("Accept", ""))
        files = [{"filename": f"{project.replace('-', '_')}-{v}-py3-none-any.whl", "url": f"x/{v}", "hashes": {},
                  "yanked": v == "0.16.0"} for v in self.releases[project]]
        body = json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": files}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_a):
        pass


@pytest.fixture(scope="module")
def index():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_released_versions_from_the_json_api(index):
    assert released_versions(index, "litert-lm") == ["0.17.2", "0.18.0", "0.18.1"]  # no yanked, no rc
    assert _Index.seen_accept[-1] == "application/vnd.pypi.simple.v1+json"
    assert new_releases(index, ["0.18.0"]) == ["0.18.1"]
    assert new_releases(index, ["0.18.1", "0.18.0"]) == []
    assert new_releases(index, []) == ["0.17.2", "0.18.0", "0.18.1"]


def test_an_unreachable_index_is_one_line():
    with pytest.raises(BuildFailed, match="did not answer for litert-lm.*FARM_INDEX_URL"):
        released_versions("http://127.0.0.1:9", "litert-lm", timeout=2)


def _g(gate, status, version):
    return {"gate": gate, "status": status, "runtime_version": version, "recheck_id": None}


def test_release_delta_labels_each_change():
    facts = {"a" * 64: {"name": "m_r.litertlm", "model_id": "m", "devices": [
        {"device_id": "local-cpu", "status": "verified", "runtime_version": "0.18.0", "decode_tokens_per_s": 100.0,
         "prefill_tokens_per_s": 1000.0},
        {"device_id": "local-cpu", "status": "verified", "runtime_version": "0.18.1", "decode_tokens_per_s": 90.0,
         "prefill_tokens_per_s": 1100.0}],
        "gates": [_g("arithmetic", "pass", "0.18.0"), _g("arithmetic", "fail", "0.18.1"),
                  _g("generation_parity", "fail", "0.18.0"), _g("generation_parity", "pass", "0.18.1"),
                  _g("metadata", "pass", "0.18.0"), _g("metadata", "pass", "0.18.1"),
                  _g("chat_template", "pass", "0.18.1")]}}
    d = release_delta(facts, "0.18.0", "0.18.1")
    change = {r["gate"]: r["change"] for r in d["gates"]}
    assert change == {"arithmetic": "regression", "generation_parity": "fixed", "metadata": "same", "chat_template": "new"}
    assert [r["gate"] for r in d["regressions"]] == ["arithmetic"]
    assert d["speed"][0]["decode_change_pct"] == -10.0
    # Each CPU class against its own class, speed against this host's own figures: an AVX2 host's
    # failure on the new release beside an AVX-512 host's pass on the old one is "new", not a
    # regression, and another host's decode is no "before".
    other = {"a" * 64: {"name": "m_r.litertlm", "model_id": "m", "devices": [
        {**facts["a" * 64]["devices"][0], "host": "fast-host"}, {**facts["a" * 64]["devices"][1], "host": "me"}],
        "gates": [{**_g("arithmetic", "pass", "0.18.0"), "cpu_class": "x86_64:avx512"},
                  {**_g("arithmetic", "fail", "0.18.1"), "cpu_class": "x86_64:avx2"}]}}
    d = release_delta(other, "0.18.0", "0.18.1", host="me")
    assert {(r["gate"], r["change"]) for r in d["gates"]} == {("arithmetic", "new")} and d["regressions"] == []
    assert d["speed"][0]["decode_before"] is None and d["speed"][0]["decode_change_pct"] is None
    assert release_delta(other, "0.18.0", "0.18.1")["speed"][0]["decode_change_pct"] == -10.0  # the control
    assert previous_release(["0.17.2", "0.18.0", "0.18.1"], "0.18.1") == "0.18.0"
    assert previous_release(["0.18.1"], "0.18.0") == "0.18.1"  # by hand on an older release: the one recorded


@pytest.mark.slow
def test_a_new_release_is_revalidated_on_every_published_file(index, tmp_path, prefect_server, toolchain_python):
    from farmtest import farm_env, run_farm

    _Index.releases = {"litert-lm": ["0.18.0", "0.18.1"], "litert-lm-api": ["0.18.0", "0.18.1"]}
    env = farm_env(tmp_path / "home", prefect_server)
    built = run_farm(["build", "examples/tiny-qwen35.yaml", "--no-gates", "--json"], env)
    assert built.returncode == 0, built.stderr[-3000:]
    sha = json.loads(built.stdout)["artifact"]["sha256"]
    first = run_farm(["gate", sha, "--runtime", "0.18.0", "--json"], env)
    assert first.returncode == 0, first.stderr[-3000:]

    proc = run_farm(["revalidate", "--index-url", index, "--json"], env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["recorded"] == ["0.18.0"] and out["versions"] == ["0.18.1"] and out["files"] == [sha]
    (delta,) = out["deltas"]
    assert delta["previous"] == "0.18.0" and delta["version"] == "0.18.1"
    gates = {r["gate"]: r for r in delta["gates"]}
    assert {"tokenizer_parity", "generation_parity", "metadata"} <= set(gates)
    assert all(r["before"] is not None for r in gates.values())
    lin = json.loads(run_farm(["lineage", sha, "--json"], env).stdout)
    assert {g["runtime_version"] for g in lin["gates"]} == {"0.18.0", "0.18.1"}
    assert any(d["device_id"] == "local-cpu" and d["runtime_version"] == "0.18.1" for d in lin["devices"])
    recorded = json.loads(run_farm(["artifacts", "--kind", "release_delta", "--json"], env).stdout)["artifacts"]
    assert [a["sha256"] for a in recorded] == [delta["delta_sha256"]]
    arts = httpx.post(f"{prefect_server}/artifacts/filter", timeout=30,
                      json={"artifacts": {"key": {"any_": ["release-litert-lm-0-18-1"]}}}).json()
    assert arts and "litert-lm 0.18.1 vs 0.18.0" in arts[0]["data"]
    events = httpx.post(f"{prefect_server}/events/filter", timeout=30,
                        json={"filter": {"event": {"name": ["farm.runtime.released"]}, "any_resource": {
                            "id": ["pypi.litert-lm.0.18.1"]}}}).json()
    assert events["events"], "no farm.runtime.released event"
    again = json.loads(run_farm(["revalidate", "--index-url", index, "--json"], env).stdout)
    assert again["versions"] == []
