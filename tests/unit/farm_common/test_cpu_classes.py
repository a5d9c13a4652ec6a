"""farm_common/cpu_classes.py: the features a process reads, the class key and label, and the CPUID
bits a class clears — each refusal with its negative control (a host that can present the class)."""

from __future__ import annotations

import platform

import pytest

from farm_common import cpu_classes as cc

SAPPHIRE = cc.CpuView("x86_64", tuple(sorted({"fma", "avx", "f16c", "avx2", "avx512f", "avx512dq", "avx512cd", "avx512bw",
                                             "avx512vl", "avx512vnni", "avx512bf16", "avx512fp16", "amx_tile",
                                             "amx_int8", "avxvnni"})), "h")
HASWELL = cc.CpuView("x86_64", ("avx", "avx2", "f16c", "fma"), "h")


def test_labels_name_what_the_kernels_are_picked_by():
    assert SAPPHIRE.label == "x86-64 AVX-512 VNNI BF16 FP16 AMX"
    assert HASWELL.label == "x86-64 AVX2"
    assert cc.label("x86_64", ["avx", "avx2", "avxvnni"]) == "x86-64 AVX2 AVX-VNNI"
    assert cc.label("aarch64", ["asimd", "asimddp"]) == "arm64 dotprod"
    assert cc.label("aarch64", ["asimd", "asimddp", "i8mm", "sve", "sve2"]) == "arm64 SVE2 i8mm dotprod"
    assert cc.label("aarch64", ["asimd"]) == "arm64 NEON"
    # The key is the features, not the host: two hosts of one class share results.
    assert HASWELL.key == cc.CpuView("x86_64", HASWELL.features, "other-host").key == "x86_64:avx+avx2+f16c+fma"
    assert cc.CpuView.from_dict(SAPPHIRE.to_dict()) == SAPPHIRE


def test_mask_spec_clears_every_feature_the_class_lacks():
    spec = cc.mask_spec(cc.CLASSES["x86-avx2"], SAPPHIRE, {"cpuid_fault"})
    clear = dict(item.split("=") for item in spec.split(","))
    ebx = int(clear["7.0.ebx"], 16)
    assert ebx >> 16 & 1 and ebx >> 30 & 1 and ebx >> 31 & 1 and not ebx >> 5 & 1  # AVX-512 F/BW/VL gone, AVX2 kept
    assert int(clear["7.0.ecx"], 16) >> 11 & 1  # AVX-512 VNNI
    assert int(clear["7.1.eax"], 16) >> 4 & 1 and int(clear["7.1.eax"], 16) >> 5 & 1  # AVX-VNNI, AVX-512 BF16
    assert "1.0.ecx" not in clear  # FMA, AVX, F16C stay
    assert cc.expected_view(cc.CLASSES["x86-avx2"], SAPPHIRE) == ("avx", "avx2", "f16c", "fma")
    vnni = cc.mask_spec(cc.CLASSES["x86-avx512-vnni"], SAPPHIRE, {"cpuid_fault"})
    assert not int(dict(i.split("=") for i in vnni.split(","))["7.0.ecx"], 16) >> 11 & 1  # VNNI kept there


def test_a_host_without_cpuid_fault_refuses_the_masked_class_in_one_line():
    with pytest.raises(cc.NotPresentable, match="no cpuid_fault") as exc:
        cc.mask_spec(cc.CLASSES["x86-avx2"], SAPPHIRE, {"avx2", "sse"})
    assert "\n" not in str(exc.value)
    # The control: the same host with the flag presents it.
    assert cc.mask_spec(cc.CLASSES["x86-avx2"], SAPPHIRE, {"cpuid_fault"})


def test_a_class_needing_a_feature_the_host_lacks_is_refused():
    with pytest.raises(cc.NotPresentable, match="needs avx512bw, avx512cd, avx512dq, avx512f, avx512vl"):
        cc.mask_spec(cc.CLASSES["x86-avx512"], HASWELL, {"cpuid_fault"})
    with pytest.raises(cc.NotPresentable, match="needs an x86-64 host"):
        cc.mask_spec(cc.CLASSES["x86-avx2"], cc.CpuView("aarch64", ("asimd",), "h"), {"cpuid_fault"})
    with pytest.raises(cc.NotPresentable, match="not presented by CPUID masking"):
        cc.mask_spec(cc.CLASSES["arm64-dotprod"], SAPPHIRE, {"cpuid_fault"})
    assert cc.mask_spec(cc.CLASSES["x86-avx512"], SAPPHIRE, {"cpuid_fault"})  # the control


def test_a_host_that_is_the_class_presents_it_natively_without_cpuid_fault():
    """An AVX2-only host (the CI machine since 2026-12-07: AMD EPYC, no AVX-512, no cpuid_fault) is the
    x86-avx2 class: nothing to clear, so no faulting is needed."""
    assert cc.is_host_class(cc.CLASSES["x86-avx2"], HASWELL)
    assert cc.mask_spec(cc.CLASSES["x86-avx2"], HASWELL, set()) == ""
    # The controls: a host with more features is not the class, and without the flag cannot mask it.
    assert not cc.is_host_class(cc.CLASSES["x86-avx2"], SAPPHIRE)
    with pytest.raises(cc.NotPresentable, match="no cpuid_fault"):
        cc.mask_spec(cc.CLASSES["x86-avx2"], SAPPHIRE, set())
    assert not cc.is_host_class(cc.CLASSES["arm64-dotprod"], HASWELL)


def test_arm64_cpuinfo_names_the_cores_and_features():
    text = cc.arm64_cpuinfo(0x414FD0B1, ["fp", "asimd", "asimddp"], cores=2)
    assert text.count("processor\t:") == 2
    assert "Features\t: fp asimd asimddp" in text and "CPU implementer\t: 0x41" in text
    assert "CPU part\t: 0xd0b" in text and "CPU variant\t: 0x4" in text and "CPU revision\t: 1" in text


@pytest.mark.skipif(platform.machine() != "x86_64", reason="reads CPUID: x86-64 only")
def test_this_process_reads_its_own_cpuid():
    view = cc.read_view()
    assert view.arch == "x86_64" and {"avx", "fma"} <= set(view.features)
    flags = cc.host_flags()
    # What the kernel lists and what CPUID answers agree on the features both name.
    for name in ("avx2", "avx512f", "avx512bw", "avx512vl"):
        assert (name in view.features) == (name in flags), name
