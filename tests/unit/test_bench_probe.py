"""bench/probe_speed.py's per-row figures: the ratio to the same call's plain step and the MFU."""

from __future__ import annotations

from bench.probe_speed import PEAK_BF16_TFLOPS, TFLOP_PER_SAMPLE, add_ratios


def test_rows_get_the_ratio_to_the_calls_base_row_and_bf16_mfu():
    bases: dict[str, float] = {}
    early = {"family": "flux", "variant": "ref", "samples_per_s": 2.7}
    add_ratios(early, bases)  # no base row yet in this call: no ratio
    assert "x_base" not in early and early["mfu"] == round(171.3 * 2.7 / 802, 3)
    base = {"family": "flux", "variant": "base", "samples_per_s": 1.8}
    add_ratios(base, bases)
    assert "x_base" not in base and "mfu" not in base and bases == {"flux": 1.8}
    fp8 = {"family": "flux", "variant": "fp8+cudnng", "samples_per_s": 3.24}
    add_ratios(fp8, bases)
    assert fp8["x_base"] == 1.8 and "mfu" not in fp8  # fp8 rows: no bf16 MFU
    other = {"family": "zimage", "variant": "ref+cudnng", "samples_per_s": 3.8}
    add_ratios(other, bases)
    assert "x_base" not in other  # another family's base does not count
    assert other["mfu"] == round(TFLOP_PER_SAMPLE["zimage"] * 3.8 / PEAK_BF16_TFLOPS, 3)
    failed = {"family": "qwen", "variant": "ref", "error": "timeout"}
    add_ratios(failed, bases)
    assert failed == {"family": "qwen", "variant": "ref", "error": "timeout"}
