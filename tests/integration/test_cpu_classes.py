"""The tiny model through every CPU class this host presents (issue 34), on the shipped registry:
this host's own class, x86-64 AVX2 and AVX-512 without VNNI by CPUID masking (native speed), arm64
dotprod and Armv9 (SVE2, i8mm, no SME) under qemu-aarch64. Each result names its class; a class's
result is reused only on that class; a file fails on the class whose answers fail, naming it; a
class the host cannot present is refused in one line. One module-scoped build in a farm of its own.

Which x86 classes are masked depends on the machine, read here from the kernel's flags (not from the
code under test): CPUID masking needs `cpuid_fault` and only removes features. On an AVX-512 VNNI
host with cpuid_fault (the CI machine until 2026-12-07) AVX2 and AVX-512 are masked; on an AVX2-only
host without it (the CI machine since: AMD EPYC, a VM) the AVX2 device is this host's own class, left
out as the same class, and AVX-512 is left out (`optional: true`). The arm64 classes run everywhere;
the negative control compares this host with the first other class presented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from farmtest import SHIPPED_DEVICES, farm_env, run_farm
from farmtest.gates import TINY, config_copy

pytestmark = pytest.mark.slow


def _kernel_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


FLAGS = _kernel_flags()
_SKX = {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}
# A masked class is presented where the kernel can fault CPUID and the host has more than the class.
MASKED = ([("cpu-x86-avx2", "x86-64 AVX2")] if "cpuid_fault" in FLAGS and (_SKX | {"avx_vnni"}) & FLAGS else []) + (
    [("cpu-x86-avx512", "x86-64 AVX-512")] if "cpuid_fault" in FLAGS and _SKX <= FLAGS and "avx512_vnni" in FLAGS
    else [])
EMULATED = [("cpu-arm64-dotprod", "arm64 dotprod"), ("cpu-arm64-armv9", "arm64 SVE2 i8mm dotprod")]
CLASS_DEVICES = ["local-cpu"] + [d for d, _ in MASKED + EMULATED]
OTHER = CLASS_DEVICES[1]  # the first class presented besides this host's own: its kernels differ
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
    assert all(set(got[d]) == PER_CLASS for d in CLASS_DEVICES[1:])
    assert all(r["status"] == "pass" for d in CLASS_DEVICES[1:] for r in got[d].values()), got
    how = {d: {r["cpu_how"] for r in got[d].values()} for d in CLASS_DEVICES}
    assert how == {"local-cpu": {"native"}, **{d: {"cpuid_mask"} for d, _ in MASKED},
                   **{d: {"qemu"} for d, _ in EMULATED}}
    labels = {d: next(iter(got[d].values()))["cpu_label"] for d in CLASS_DEVICES}
    assert all(labels[d] == label for d, label in MASKED + EMULATED), labels
    assert len({next(iter(got[d].values()))["cpu_class"] for d in CLASS_DEVICES}) == len(CLASS_DEVICES)  # kernel paths
    # Lineage (the HTTP API serves the same record) carries the class of each result, with the host.
    rec = f.lineage(summary["artifact"]["sha256"])
    armv9 = next(g for g in rec["gates"] if g["device"] == "cpu-arm64-armv9" and g["gate"] == "generation_parity")
    assert armv9["cpu"]["how"] == "qemu" and {"sve2", "i8mm", "asimddp"} <= set(armv9["cpu"]["features"])
    assert armv9["host"] and armv9["replies"] and armv9["cpu_class"].startswith("aarch64:")
    # The kernels differ: logits_parity measured other numbers on another class than on this host.
    lp = {g["device"]: g["metrics"]["max_abs_diff"] for g in rec["gates"] if g["gate"] == "logits_parity"}
    assert lp[OTHER] != lp["local-cpu"]
    # Speed where it is real: this host and the masked x86 classes are benchmarked, the emulated never.
    devices = {d["device_id"]: d for d in rec["devices"]}
    assert set(devices) == {"local-cpu"} | {d for d, _ in MASKED}
    for d, label in MASKED:
        assert devices[d]["cpu"]["label"] == label and devices[d]["decode_tokens_per_s"] > 0
    text = f.farm("lineage", summary["artifact"]["sha256"]).stdout
    assert "on arm64 dotprod [emulated by qemu" in text
    assert all(f"on {label} [CPUID-masked" in text for _, label in MASKED)
    # Asked for a benchmark anyway, an emulated class is refused in one line (it has no speed to give).
    proc = f.farm("bench", summary["artifact"]["sha256"], "--device", "cpu-arm64-dotprod")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "emulated CPU class" in proc.stderr


def test_the_card_verifies_each_class_by_name(classes, tmp_path):
    f, summary = classes
    proc = f.farm("card", "tiny-qwen35", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (tmp_path / "CARD.md").read_text()
    section = md.split("## CPU classes")[1].split("\n## ")[0]
    host = summary["gates"][0]["cpu_label"]
    for label in [host] + [label for _, label in MASKED + EMULATED]:
        assert f"| {label} |" in section and "| verified |" in section
    assert "emulated by qemu-aarch64" in section
    assert ("CPUID-masked on this host" in section) == bool(MASKED)
    assert f"Answers verified on CPU classes: {host}" in md
    proc = f.farm("publish", "tiny-qwen35", "--to", str(tmp_path / "repo"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    front = yaml.safe_load((tmp_path / "repo" / "README.md").read_text().split("---\n")[1])
    assert {"cpu:arm64-dotprod", "cpu:arm64-sve2-i8mm-dotprod"} <= set(front["tags"])
    assert "cpu:" + host.lower().replace(" ", "-") in front["tags"]


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
    """The negative control: the same bytes measured other numbers on another class than on this
    host (XNNPACK's kernels); a logits bound set between the two passes one and fails the other,
    whose failure names its class, and a failure on the other class is re-checked on that class."""
    f, summary = classes
    sha = summary["artifact"]["sha256"]
    rec = f.lineage(sha)
    lp = {g["device"]: g["metrics"]["max_abs_diff"] for g in rec["gates"] if g["gate"] == "logits_parity"}
    host, other = lp["local-cpu"], lp[OTHER]
    assert host != other
    bound = (host + other) / 2
    raw = yaml.safe_load(TINY.read_text())
    cfg = config_copy(tmp_path, TINY, "between", gates={**(raw.get("gates") or {}),
                                                        "logits_parity": {"max_abs_diff_max": bound}})
    proc = f.farm("gate", sha, "--gate", "logits_parity", "--device", "local-cpu", "--device", OTHER,
                  "--config", str(cfg), "--json")
    out = json.loads(proc.stdout)
    got = {r["device"]: r for r in out["results"]}
    lower, higher = ("local-cpu", OTHER) if host < other else (OTHER, "local-cpu")
    assert got[lower]["status"] == "pass" and got[higher]["status"] == "fail", got
    assert proc.returncode == 1
    assert f"gate logits_parity [{got[higher]['cpu']['label']}] failed" in proc.stderr
    assert f"[{got[lower]['cpu']['label']}] failed" not in proc.stderr
    if higher == OTHER:
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
    avx2 = rows["cpu-x86-avx2"]["class"]
    if ("cpu-x86-avx2", "x86-64 AVX2") in MASKED:
        assert avx2["cpu"]["label"] == "x86-64 AVX2"
    elif rows["local-cpu"]["class"]["cpu"]["label"] == "x86-64 AVX2":  # an AVX2 host is the class itself
        assert avx2["presented"] is False and "the same class as local-cpu" in avx2["why"]
    else:  # no cpuid_fault here: left out (optional) with the reason
        assert avx2["presented"] is False and "cpuid_fault" in avx2["why"]
