"""lorastudio's restated ComfyUI key rules (lora/comfy.py comfy_key_map, the sidecar's "loads in
ComfyUI" verdict) and its LyCORIS writer's layer names (lora/lycoris.py layer_key) against
ComfyUI's own key map, kept as data: tests/data/comfyui_key_map.json.gz is
`comfy.lora.model_lora_keys_unet` of each family's tiny model, run by ComfyUI itself at the commit
the file names (`python -m bench.comfyui_check --comfyui <checkout> --key-table
tests/data/comfyui_key_map.json.gz --commit <its commit>`; bench/comfyui_key_table.py). No
ComfyUI here: the default suite checks the facts that run learnt. Regenerate the table when a
ComfyUI release changes comfy/lora.py (and the tiny models' layers with it)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from lorastudio import families
from lorastudio.lora.comfy import comfy_key_map
from lorastudio.lora.lycoris import generic_spelling, kohya_spelling, layer_key, module_key

TABLE = json.loads(
    gzip.decompress((Path(__file__).parents[2] / "data" / "comfyui_key_map.json.gz").read_bytes())
)
FAMILIES = sorted(TABLE["families"])


def test_the_table_is_of_a_named_comfyui_commit_and_every_family_comfyui_has():
    assert len(TABLE["comfyui_commit"]) == 40
    assert set(FAMILIES) == set(families.names())  # Krea 2 included: a ComfyUI model since v0.2x


@pytest.mark.parametrize("family", FAMILIES)
def test_every_name_the_sidecar_says_comfyui_maps_is_in_comfyuis_own_key_map(family, layer_shapes):
    """A name of comfy_key_map that ComfyUI's map lacks would be a layer the sidecar says ComfyUI
    loads while ComfyUI logs "lora key not loaded" for it."""
    ours = comfy_key_map(family, layer_shapes(family))
    theirs = TABLE["families"][family]
    assert ours and not sorted(set(ours) - set(theirs))[:10]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("adapter", ["dora", "loha", "lokr"])
def test_the_lycoris_writer_names_each_layer_as_comfyui_maps_it(family, adapter, layer_shapes):
    """Every layer ComfyUI maps in the LyCORIS spelling is written under a name ComfyUI maps to
    the same weight (Z-Image LoKr's `diffusion_model.<diffusers name>`: RELIABILITY 1700; SDXL
    LoHa / LoKr's `lora_unet_<SGM name>`: RELIABILITY 1980)."""
    theirs = TABLE["families"][family]
    mapped = {m: theirs[module_key(m)] for m in layer_shapes(family) if module_key(m) in theirs}
    assert mapped
    generic = generic_spelling(family, adapter)
    written = {m: theirs.get(layer_key(m, generic, kohya_spelling(family, adapter))) for m in mapped}
    assert written == mapped


def test_comfyui_maps_zimage_layers_under_both_spellings_diffusers_reads_one():
    """The fact behind the Z-Image LoKr spelling: ComfyUI's Lumina2 map takes the diffusers name
    under `diffusion_model.` as well as LyCORIS's; diffusers' Z-Image LoKr reader takes only the
    former (tests/unit/lora/test_diffusers_lokr_check.py)."""
    theirs = TABLE["families"]["z-image"]
    for module in ("layers.0.attention.to_q", "layers.0.feed_forward.w1"):
        assert theirs["diffusion_model." + module] == theirs[module_key(module)]
    assert generic_spelling("z-image", "lokr")
