"""Forge's, A1111's and LyCORIS' own loaders on lorastudio's SDXL and FLUX.1 files of every adapter
kind (bench/webui_check.py + webui_side.py; session 39 portable3). Each cell trains one tiny CPU
run (3 steps, rank 4, alpha 8) and hands its file to each loader's own code in a process of its
own: every layer of the file matched and every weight the trained change (peft's merge) within
1e-4 of the layer's largest change.

Needs the loaders' trees (never vendored; bench/webui_check.py says which commits):
LORASTUDIO_FORGE (a Forge tree), LORASTUDIO_A1111 (A1111's extensions-builtin/Lora),
LORASTUDIO_LYCORIS (a folder holding lycoris-lora and einops). Skipped without them.
"""

from __future__ import annotations

import pytest
from bench.webui_check import available, check

pytestmark = [pytest.mark.slow]

# (family, case): the loaders whose own code loads the file at the trained strength
LOADS = {
    ("sdxl", "lora"): ("forge", "a1111", "lycoris"),
    ("sdxl", "dora"): ("forge",),
    ("sdxl", "loha"): ("forge", "a1111", "lycoris"),
    ("sdxl", "lokr"): ("forge", "a1111", "lycoris"),
    ("sdxl", "lokr-full"): ("forge", "a1111", "lycoris"),
    ("sdxl", "lokr-f8"): ("forge", "a1111"),
    ("flux", "lora"): ("forge",),
    ("flux", "lora-kohya"): ("forge", "lycoris"),
    ("flux", "dora"): ("forge",),
    ("flux", "loha"): ("forge", "lycoris"),
    ("flux", "lokr"): ("forge", "lycoris"),
    ("flux", "lokr-full"): ("forge", "lycoris"),
    ("flux", "lokr-f8"): ("forge",),
}


def _needs(loaders: tuple[str, ...]) -> None:
    for loader in loaders:
        why = available(loader)
        if why:
            pytest.skip(why)


@pytest.mark.parametrize(("family", "case"), sorted(LOADS))
def test_each_loader_applies_the_file_at_the_trained_strength(family, case, tmp_path):
    loaders = LOADS[(family, case)]
    _needs(loaders)
    for result in check(family, case, list(loaders), tmp_path):
        assert result["ok"], result
        assert result["unmatched"] == [] and result["skipped"] == [] and result["problems"] == []
        assert result["patched_weights"] >= result["expected_weights"] > 0
        assert result["worst_relative_error"] <= 1e-4


def test_a1111_leaves_every_layer_of_an_sdxl_lycoris_layout_dora_file_unmatched(tmp_path):
    """The documented counter-example (RELIABILITY Known problems): SDXL's DoRA file keeps the
    `lycoris_<diffusers name>` spelling, which A1111's load_network does not match."""
    _needs(("a1111",))
    (result,) = check("sdxl", "dora", ["a1111"], tmp_path)
    assert result["ok"] is False and result["patched_weights"] == 0
    assert result["unmatched"] and all(k.startswith("lycoris_") for k in result["unmatched"])


def test_lycoris_own_loader_cannot_rebuild_a_lokr_layer_whose_factor_squared_exceeds_it(tmp_path):
    """RELIABILITY's Known problem "LoKr factor order": peft's (f, d / f) w1 / w2 where f x f > d
    (8 on the tiny FLUX.1's 32-wide layers), which A1111 and Forge load exactly (they take the
    factors' shapes from the file) and LyCORIS' make_module_from_state_dict refuses."""
    _needs(("lycoris",))
    (result,) = check("flux", "lokr-f8", ["lycoris"], tmp_path)
    assert result["ok"] is False and "must match the size" in result["error"]


def test_lycoris_own_loader_reads_a_dora_scale_as_the_magnitude(tmp_path):
    """RELIABILITY's Known problem (the LyCORIS-layout DoRA's dora_scale): ComfyUI's reading is
    written, LyCORIS' modules read dora_scale as DoRA's magnitude: every layer loads, off."""
    _needs(("lycoris",))
    (result,) = check("flux", "dora", ["lycoris"], tmp_path)
    assert result["unmatched"] == [] and result["problems"] and result["ok"] is False
