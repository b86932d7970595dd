"""The CPU's matrix features and the precision `--dtype auto` picks from them."""

import torch

from backend.core import cpu_features
from backend.core.cpu_features import MATRIX_FEATURES, auto_dtype, bf16_over_fp32
from backend.core.cpu_features import cpu_features as features


def test_features_are_this_cpus_flags_in_a_fixed_order():
    found = features()
    assert set(found) <= set(MATRIX_FEATURES)
    assert list(found) == [feature for feature in MATRIX_FEATURES if feature in found]
    if str(torch.backends.cpu.get_cpu_capability()) in ("AVX2", "AVX512"):
        assert "avx2" in found


def test_without_cpuinfo_torchs_own_probes_name_the_features(monkeypatch):
    monkeypatch.setattr(cpu_features, "_cpuinfo_flags", lambda: None)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    cpu_features.cpu_features.cache_clear()
    try:
        assert "amx_bf16" in features()
    finally:
        cpu_features.cpu_features.cache_clear()


def test_auto_is_fp32_without_a_bf16_unit_and_probes_nothing(monkeypatch):
    monkeypatch.setattr(cpu_features, "cpu_features", lambda: ("avx2",))
    monkeypatch.setattr(cpu_features, "bf16_over_fp32", lambda weight: (_ for _ in ()).throw(AssertionError))
    dtype, why = auto_dtype(torch.device("cpu"), torch.zeros(8, 8))
    assert dtype == torch.float32 and "no bf16 unit" in why


def test_auto_takes_bf16_only_where_the_probe_finds_it_cheaper_at_every_width(monkeypatch):
    monkeypatch.setattr(cpu_features, "cpu_features", lambda: ("amx_bf16", "avx512f", "avx2"))
    monkeypatch.setattr(cpu_features, "bf16_over_fp32", lambda weight: {1: 0.6, 9: 0.3})
    assert auto_dtype(torch.device("cpu"), torch.zeros(8, 8))[0] == torch.bfloat16
    monkeypatch.setattr(cpu_features, "bf16_over_fp32", lambda weight: {1: 1.2, 9: 0.3})
    dtype, why = auto_dtype(torch.device("cpu"), torch.zeros(8, 8))
    assert dtype == torch.float32 and "1 rows 1.20x" in why
    assert auto_dtype(torch.device("cuda"), None)[0] == torch.bfloat16


def test_the_probe_times_both_widths_in_both_precisions():
    ratios = bf16_over_fp32(torch.randn(96, 64), seconds=0.02)
    assert set(ratios) == {1, 9} and all(ratio > 0 for ratio in ratios.values())
