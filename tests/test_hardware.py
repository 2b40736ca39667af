"""Hardware catalog: the agreed keys and fields, datasheet figures, and name lookup."""

from __future__ import annotations

import dataclasses

import pytest

from picker.errors import UserError
from picker.inputs.hardware import ALIASES, CATALOG, Hardware, get_hardware, resolve_hardware_name

EXPECTED_KEYS = {"h100-sxm", "h100-pcie", "h200", "b200", "a100-40gb", "a100-80gb", "l40s", "a10g",
                 "rtx-4090", "rtx-3090", "cpu"}


def test_catalog_keys() -> None:
    assert set(CATALOG) == EXPECTED_KEYS


def test_field_names_are_the_agreed_ones() -> None:
    # The roofline reads these names; renaming one breaks it.
    assert [f.name for f in dataclasses.fields(Hardware)] == [
        "name", "description", "memory_bandwidth_gbps", "bf16_tflops", "memory_gib", "source"]


@pytest.mark.parametrize("key", sorted(EXPECTED_KEYS))
def test_entries_are_sane(key: str) -> None:
    hw = CATALOG[key]
    assert hw.name == key
    assert hw.source and hw.description
    assert 100 < hw.memory_bandwidth_gbps < 20_000
    assert 1 < hw.bf16_tflops < 5_000
    assert 8 <= hw.memory_gib <= 1024
    with pytest.raises(dataclasses.FrozenInstanceError):
        hw.bf16_tflops = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(("key", "bandwidth", "tflops", "memory"), [
    ("h100-sxm", 3350, 989, 80),      # H100 datasheet
    ("h100-pcie", 2000, 756, 80),
    ("h200", 4800, 989, 141),
    ("b200", 8000, 2250, 180),
    ("a100-40gb", 1555, 312, 40),
    ("a100-80gb", 2039, 312, 80),
    ("l40s", 864, 362.05, 48),
    ("rtx-4090", 1008, 165.2, 24),    # BF16 tensor with FP32 accumulate, dense
    ("rtx-3090", 936, 71, 24),
])
def test_datasheet_figures(key: str, bandwidth: float, tflops: float, memory: float) -> None:
    hw = CATALOG[key]
    assert (hw.memory_bandwidth_gbps, hw.bf16_tflops, hw.memory_gib) == (bandwidth, tflops, memory)


def test_uncertain_and_assumed_entries_say_so() -> None:
    assert "uncertain" in CATALOG["a10g"].source
    assert "assumption" in CATALOG["cpu"].source


@pytest.mark.parametrize(("name", "key"), [
    ("h100-sxm", "h100-sxm"), ("H100", "h100-sxm"), ("h100_sxm", "h100-sxm"), ("H100 SXM", "h100-sxm"),
    (" H200 ", "h200"), ("A100", "a100-80gb"), ("a100_40gb", "a100-40gb"), ("RTX4090", "rtx-4090"),
    ("rtx_3090", "rtx-3090"), ("L40S", "l40s"), ("CPU", "cpu"),
])
def test_lookup_is_tolerant(name: str, key: str) -> None:
    assert resolve_hardware_name(name) == key
    assert get_hardware(name) is CATALOG[key]


def test_aliases_point_into_the_catalog() -> None:
    assert all(target in CATALOG for target in ALIASES.values())
    assert not set(ALIASES) & set(CATALOG)


def test_unknown_name_lists_the_allowed_ones() -> None:
    with pytest.raises(UserError) as info:
        get_hardware("tpu-v5e")
    message = str(info.value)
    assert "'tpu-v5e'" in message
    assert all(key in message for key in EXPECTED_KEYS)
    assert resolve_hardware_name("h100-sxm-nvl") is None
