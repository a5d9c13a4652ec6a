"""The tiny model through every CPU class this host presents (issue 34), on the shipped registry:
this host's own class, x86-64 AVX2 and AVX-512 without VNNI by CPUID masking (native speed), arm64
dotprod and Armv9 (SVE2, i8mm, no SME) under qemu-aarch64. Each result names its class; a class's
result is reused only on that class; a file fails on the class whose answers fail, naming it; a
class the host cannot present is refused in one line. One module-scoped build in a farm of its own.

On this machine (the CI machine: AMD EPYC, AVX-512 with VNNI and BF16, cpuid_fault) the masked
classes are below the host's; a host without cpuid_fault leaves them out (`optional: true`), which
test_a_class_this_host_cannot_present_is_refused_or_left_out checks with a crafted registry."""

from __future__ import annotations

import json

import pytest
import yaml

from farmtest import SHIPPED_DEVICES, farm_env, run_farm
from farmtest.gates import TINY, config_copy

pytestmark = pytest.mark.slow

CLASS_DEVICES = ["local-cpu", "cpu-x86-avx2", "cpu-x86-avx512", "cpu-arm64-dotprod", "cpu-arm64-armv9"]
PER_CLASS = {"logits_parity", "generation_parity", "prompt_lengths", "multi_turn"}  # the tiny model's


class Farm:
    def __init__(self, env: dict[str, str]):
        self.env = env

    def farm(self, *args: str, timeout: float = 900, **extra: str):
        return run_farm(list(args), {**self.env, **extra}, timeout=timeout)

    def lineage(self, sha: str) -> dict:
        proc = self.farm("lineage", sha, "--json")
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def classes(tmp_path_factory, prefect_server, toolchain_python) -> tuple[Farm, dict]:
    env = farm_env(tmp_path_factory.mktemp("farm-classes"), prefect_server, FARM_DEVICES_FILE=str(SHIPPED_DEVICES))
    f = Farm(env)
    proc = f.farm("build", str(TINY), "--json", timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return f, json.loads(proc.stdout)


def _by_device(results: list[dict]) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for r in results:
        out.setdefault(r["device"], {})[r["gate"]] = r
    return out


def test_the_tiny_model_passes_on_every_class_and_each_result_names_its_class(classes):
    f, summary = classes
    got = _by_device(summary["gates"])
    assert list(got) == CLASS_DEVICES
    assert set(got["cpu-x86-avx2"]) == set(got["cpu-arm64-armv9"]) == PER_CLASS
    assert all(r["status"] == "pass" for d in CLASS_DEVICES[1:] for r in got[d].values()), got
    how = {d: {r["cpu_how"] for r in got[d].values()} for d in CLASS_DEVICES}
    assert how == {"local-cpu": {"native"}, "cpu-x86-avx2": {"cpuid_mask"}, "cpu-x86-avx512": {"cpuid_mask"},
                   "cpu-arm64-dotprod": {"qemu"}, "cpu-arm64-armv9": {"qemu"}}
    labels = {d: next(iter(got[d].values()))["cpu_label"] for d in CLASS_DEVICES}
    assert labels["cpu-x86-avx2"] == "x86-64 AVX2" and labels["cpu-x86-avx512"] == "x86-64 AVX-512"
    assert labels["cpu-arm64-dotprod"] == "arm64 dotprod" and labels["cpu-arm64-armv9"] == "arm64 SVE2 i8mm dotprod"
    assert len({next(iter(got[d].values()))["cpu_class"] for d in CLASS_DEVICES}) == 5  # five kernel paths
    # Lineage (the HTTP API serves the same record) carries the class of each result, with the host.
    rec = f.lineage(summary["artifact"]["sha256"])
    armv9 = next(g for g in rec["gates"] if g["device"] == "cpu-arm64-armv9" and g["gate"] == "generation_parity")
    assert armv9["cpu"]["how"] == "qemu" and {"sve2", "i8mm", "asimddp"} <= set(armv9["cpu"]["features"])
    assert armv9["host"] and armv9["replies"] and armv9["cpu_class"].startswith("aarch64:")
    # The kernels differ: logits_parity measured other numbers on AVX2 than on this host (the same bytes).
    lp = {g["device"]: g["metrics"]["max_abs_diff"] for g in rec["gates"] if g["gate"] == "logits_parity"}
    assert lp["cpu-x86-avx2"] != lp["local-cpu"]
    # Speed where it is real: the masked x86 classes are benchmarked, the emulated ones never.
    devices = {d["device_id"]: d for d in rec["devices"]}
    assert set(devices) == {"local-cpu", "cpu-x86-avx2", "cpu-x86-avx512"}
    assert devices["cpu-x86-avx2"]["cpu"]["label"] == "x86-64 AVX2" and devices["cpu-x86-avx2"]["decode_tokens_per_s"] > 0
    text = f.farm("lineage", summary["artifact"]["sha256"]).stdout
    assert "on x86-64 AVX2 [CPUID-masked" in text and "on arm64 dotprod [emulated by qemu" in text
    # Asked for a benchmark anyway, an emulated class is refused in one line (it has no speed to give).
    proc = f.farm("bench", summary["artifact"]["sha256"], "--device", "cpu-arm64-dotprod")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "emulated CPU class" in proc.stderr


def test_the_card_verifies_each_class_by_name(classes, tmp_path):
    f, summary = classes
    proc = f.farm("card", "tiny-qwen35", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "CARD.md").read_text()
    section = md.split("## CPU classes")[1].split("\n## ")[0]
    for label in ("x86-64 AVX2", "x86-64 AVX-512", "arm64 dotprod", "arm64 SVE2 i8mm dotprod"):
        assert f"| {label} |" in section and "| verified |" in section
    assert "emulated by qemu-aarch64" in section and "CPUID-masked on this host" in section
    assert "Answers verified on CPU classes: x86-64 AVX-512" in md
    proc = f.farm("publish", "tiny-qwen35", "--to", str(tmp_path / "repo"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    front = yaml.safe_load((tmp_path / "repo" / "README.md").read_text().split("---\n")[1])
    assert {"cpu:x86-64-avx2", "cpu:arm64-dotprod", "cpu:arm64-sve2-i8mm-dotprod"} <= set(front["tags"])


def test_a_noop_build_reuses_each_class_own_results(classes):
    f, summary = classes
    proc = f.farm("build", str(TINY), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads(proc.stdout)
    assert again.get("recorded") is True
    first = {(g["device"], g["gate"]): g for g in summary["gates"]}
    for g in again["gates"]:  # every class reused its own result, none another class's
        assert g["reused"] and first[(g["device"], g["gate"])]["cpu_class"] == g["cpu_class"]
    assert {g["device"] for g in again["gates"]} == set(CLASS_DEVICES)


def test_a_file_fails_on_the_class_whose_answers_fail_naming_it(classes, tmp_path):
    """The negative control: the same bytes measured other numbers on AVX2 than on this host
    (XNNPACK's kernels); a logits bound set between the two passes this host and fails AVX2, whose
    failure names the class, and its re-check runs on that class."""
    f, summary = classes
    sha = summary["artifact"]["sha256"]
    rec = f.lineage(sha)
    lp = {g["device"]: g["metrics"]["max_abs_diff"] for g in rec["gates"] if g["gate"] == "logits_parity"}
    host, avx2 = lp["local-cpu"], lp["cpu-x86-avx2"]
    assert host != avx2
    bound = (host + avx2) / 2
    raw = yaml.safe_load(TINY.read_text())
    cfg = config_copy(tmp_path, TINY, "between", gates={**(raw.get("gates") or {}),
                                                        "logits_parity": {"max_abs_diff_max": bound}})
    proc = f.farm("gate", sha, "--gate", "logits_parity", "--device", "local-cpu", "--device", "cpu-x86-avx2",
                  "--config", str(cfg), "--json")
    out = json.loads(proc.stdout)
    got = {r["device"]: r for r in out["results"]}
    lower, higher = ("local-cpu", "cpu-x86-avx2") if host < avx2 else ("cpu-x86-avx2", "local-cpu")
    assert got[lower]["status"] == "pass" and got[higher]["status"] == "fail", got
    assert proc.returncode == 1
    if higher == "cpu-x86-avx2":
        assert "gate logits_parity [x86-64 AVX2] failed" in proc.stderr
        assert out["rechecks"] and out["rechecks"][0]["basis"]  # re-checked on the class that failed


def test_a_class_this_host_cannot_present_is_refused_or_left_out(classes, tmp_path):
    f, summary = classes
    reg = yaml.safe_load(SHIPPED_DEVICES.read_text())
    arm = next(d for d in reg["devices"] if d["id"] == "cpu-arm64-dotprod")
    arm["runner"].update(qemu="/nonexistent/qemu-aarch64-static", optional=False)
    path = tmp_path / "devices.yaml"
    path.write_text(yaml.safe_dump(reg))
    proc = f.farm("gate", summary["artifact"]["sha256"], "--gate", "multi_turn", FARM_DEVICES_FILE=str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cpu-arm64-dotprod" in lines[0] and "qemu-user-static" in lines[0], lines
    # The control: optional, it is left out with the reason and the others run.
    arm["runner"]["optional"] = True
    path.write_text(yaml.safe_dump(reg))
    proc = f.farm("devices", "--classes", "--json", FARM_DEVICES_FILE=str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["id"]: r for r in json.loads(proc.stdout)["devices"]}
    assert rows["cpu-arm64-dotprod"]["class"]["presented"] is False
    assert "qemu-user-static" in rows["cpu-arm64-dotprod"]["class"]["why"]
    assert rows["cpu-x86-avx2"]["class"]["cpu"]["label"] == "x86-64 AVX2"
