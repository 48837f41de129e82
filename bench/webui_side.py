"""The A1111 / Forge half of bench/webui_check.py: their own LoRA code on one lorastudio file.

    python bench/webui_side.py --loader forge --root /path/to/forge CASE_DIR     (one JSON line)
    python bench/webui_side.py --loader a1111 --root /path/to/a1111 CASE_DIR

Imports no lorastudio code: everything here is the WebUI's (a checkout given by --root, never
vendored) plus torch and safetensors, with the WebUI's app modules stubbed (the stub surface
below). CASE_DIR is bench/comfyui_check.py's case folder (case.json, base.safetensors and
expected.safetensors in diffusers names).

Forge (lllyasviel/stable-diffusion-webui-forge, `backend/patcher` + `packages_3rdparty`): the
weights in Forge's names by Forge's own diffusers tables (`utils.unet_to_diffusers` for SDXL,
`utils.flux_to_diffusers` for FLUX.1, fused q / k / v slices assembled), then what
`extensions-builtin/sd_forge_lora/networks.load_lora_for_models` runs: `model_lora_keys_unet`,
`load_lora` (the unmatched keys reported), `ModelPatcher.add_patches` and `LoraLoader.refresh`
(`merge_lora_to_weight`, each adapter kind's rule). Stubbed: `backend.memory_management`
(cast_to_device, module_size), gguf / `backend.operations*` (no quantized weights here),
`backend.misc.checkpoint_pickle`.

A1111 (extensions-builtin/Lora of AUTOMATIC1111/stable-diffusion-webui): SDXL only (A1111 has no
FLUX.1). The U-Net's modules at their SGM names under `diffusion_model_` (what
`assign_network_names_to_compvis_modules` gives an SDXL model), then `networks.load_network`
(key matching, `convert_diffusers_name_to_compvis`, each module type's `create_module`) and each
matched module's `calc_updown(weight)` (what `network_apply_weights` adds). Stubbed: the `modules`
package and gradio (MagicMock modules; `sd_models.read_state_dict` reads the file with
safetensors; `devices.cpu` / `devices.device` the CPU, `devices.dtype` fp32).

Every changed weight must equal the expected change within case.json's tolerance (relative to the
layer's largest change, beyond the fp32 rounding of the weight) and nothing else may move.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock


def _tree(weights: dict[str, Any]) -> Any:
    """An nn.Module of nn.Linear / nn.Conv2d leaves holding `weights` (2-D / 4-D "x.weight" with
    their "x.bias") at their dotted names; other tensors as plain parameters."""
    import torch

    root = torch.nn.Module()
    for name, value in sorted(weights.items()):
        *path, leaf = name.split(".")
        module = root
        for part in path:
            if part not in module._modules:
                module.add_module(part, torch.nn.Module())
            module = module._modules[part]
        module.register_parameter(leaf, torch.nn.Parameter(value.clone(), requires_grad=False))
    # give each module with a 2-D / 4-D weight the Linear / Conv2d class (A1111 reads isinstance)
    for module in root.modules():
        weight = module._parameters.get("weight")
        if weight is not None and "bias" not in module._parameters:
            module.bias = None
        if weight is not None and weight.dim() == 2:
            module.__class__ = torch.nn.Linear
            module.out_features, module.in_features = weight.shape
        elif weight is not None and weight.dim() == 4:
            module.__class__ = torch.nn.Conv2d
    return root


def compare(
    before: dict[str, Any], after: dict[str, Any], expected: dict[str, Any], tol: float
) -> tuple[list[str], float]:
    """(problems, worst relative error): every weight's after - before against its expected change
    (comfyui_side.compare's rule)."""
    import torch

    errors, worst = [], 0.0
    for key in sorted(before):
        w0, w1 = before[key].float(), after[key].float()
        want = expected.get(key, torch.zeros_like(w0)).float()
        diff = (w1 - w0 - want).abs().max().item()
        scale = want.abs().max().item()
        rounding = 4 * torch.finfo(torch.float32).eps * w0.abs().max().item()
        if scale == 0.0:
            if diff > rounding:
                errors.append(f"{key}: an unchanged weight moved by up to {diff:.3g}")
            continue
        worst = max(worst, max(diff - rounding, 0.0) / scale)
        if diff > tol * scale + rounding:
            errors.append(f"{key}: the change differs from the trained one by {diff:.3g} (max {scale:.3g})")
    return errors, worst


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def forge_native(
    utils: Any, case: dict[str, Any], weights: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """({Forge name: tensor}, the model config) of diffusers-named `weights`, by Forge's own tables."""
    import torch

    if case["family"] == "sdxl":
        mapping = utils.unet_to_diffusers(case["unet_config"])
        missing = sorted(k for k in weights if k not in mapping)
        if missing:
            raise SystemExit(f"unet_to_diffusers does not name {missing[:3]}")
        return {mapping[k]: v for k, v in weights.items()}, case["unet_config"]
    depth = len({k.split(".")[1] for k in weights if k.startswith("transformer_blocks.")})
    single = len({k.split(".")[1] for k in weights if k.startswith("single_transformer_blocks.")})
    hidden = weights["x_embedder.weight"].shape[0]
    config = {"depth": depth, "depth_single_blocks": single, "hidden_size": hidden}
    mapping = utils.flux_to_diffusers(config, output_prefix="")
    out: dict[str, Any] = {}
    slices: dict[str, list[tuple[int, int, Any]]] = {}
    for key, value in weights.items():
        target = mapping.get(key)
        if target is None:
            raise SystemExit(f"flux_to_diffusers does not name {key}")
        if isinstance(target, str):
            out[target] = value
        elif target[1] is None and len(target) > 2:  # a reordered weight (norm_out's scale / shift)
            out[target[0]] = target[2](value)
        else:
            dim, start, length = target[1]
            slices.setdefault(target[0], []).append((start, length, value))
            if dim != 0:
                raise SystemExit(f"{key}: a slice along dim {dim}")
    for name, parts in slices.items():
        end = max(s + n for s, n, _ in parts)
        first = parts[0][2]
        fused = torch.zeros((end, *first.shape[1:]), dtype=first.dtype)
        for start, length, value in parts:
            fused[start : start + length] = value
        out[name] = fused
    return out, config


def run_forge(
    root: Path, case: dict[str, Any], base: dict[str, Any], change: dict[str, Any]
) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file

    sys.path.insert(0, str(root))
    backend = _stub("backend")
    backend.__path__ = [str(root / "backend")]
    _stub("gguf")
    _stub("backend.misc")
    _stub("backend.misc.checkpoint_pickle")
    _stub("backend.operations_gguf", ParameterGGUF=type("ParameterGGUF", (), {}))
    _stub("backend.operations", bnb_avaliable=False)

    def cast_to_device(tensor: Any, device: Any, dtype: Any, copy: bool = False) -> Any:
        return tensor.to(device=device, dtype=dtype, copy=copy)

    mm = _stub(
        "backend.memory_management",
        cast_to_device=cast_to_device,
        module_size=lambda module: 0,
        soft_empty_cache=lambda *a, **k: None,
        signal_empty_cache=False,
    )
    backend.memory_management = mm
    import backend.patcher.base as base_patcher
    import backend.patcher.lora as forge_lora
    from packages_3rdparty.comfyui_lora_collection import utils

    native, config = forge_native(utils, case, base)
    moved, _ = forge_native(utils, case, {k: v + change.get(k, 0) for k, v in base.items()})
    expected = {
        f"diffusion_model.{k}": moved[k] - v for k, v in native.items() if not torch.equal(moved[k], v)
    }
    model = torch.nn.Module()
    model.diffusion_model = _tree(native)
    model.diffusion_model.config = config
    repo = (
        "black-forest-labs/FLUX.1-dev"
        if case["family"] != "sdxl"
        else "stabilityai/stable-diffusion-xl-base-1.0"
    )
    model.config = types.SimpleNamespace(huggingface_repo=repo)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    lora = load_file(case["lora"])
    strength = float(case.get("strength", 1.0))
    key_map = forge_lora.model_lora_keys_unet(model, {})
    patches, unmatched = forge_lora.load_lora(dict(lora), key_map)
    patcher = base_patcher.ModelPatcher(model, torch.device("cpu"), torch.device("cpu"))
    loaded = patcher.add_patches(filename="case", patches=patches, strength_patch=strength)
    skipped = [str(k) for k in patches if k not in loaded]
    model.lora_loader.refresh(patcher.lora_patches, offload_device=torch.device("cpu"))
    after = {k: v.detach() for k, v in model.state_dict().items()}
    problems, worst = compare(before, after, expected, float(case.get("tolerance", 1e-4)))
    return {
        "unmatched": sorted(unmatched),
        "skipped": skipped,
        "patched_weights": len({k[0] if isinstance(k, tuple) else k for k in loaded}),
        "expected_weights": len(expected),
        "problems": problems[:20],
        "worst_relative_error": worst,
    }


def sgm_native(case: dict[str, Any], base: dict[str, Any], root: Path) -> dict[str, Any]:
    """SDXL's diffusers U-Net weights at their SGM names, by Forge's copy of ComfyUI's
    unet_to_diffusers (A1111's own loader builds its model from the SGM checkpoint itself)."""
    sys.path.insert(0, str(root))
    from packages_3rdparty.comfyui_lora_collection import utils

    mapping = utils.unet_to_diffusers(case["unet_config"])
    return {mapping[k]: v for k, v in base.items()}


def run_a1111(
    root: Path, forge_root: Path, case: dict[str, Any], base: dict[str, Any], change: dict[str, Any]
) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file

    if case["family"] != "sdxl":
        return {"skipped_case": "A1111 has no FLUX.1 model"}
    native = sgm_native(case, base, forge_root)
    moved = sgm_native(case, {k: v + change.get(k, 0) for k, v in base.items()}, forge_root)
    expected = {k: moved[k] - v for k, v in native.items() if not torch.equal(moved[k], v)}
    for name in ("gradio", "modules", "modules.shared", "modules.devices", "modules.sd_models", "modules.errors",
                 "modules.scripts", "modules.sd_hijack", "modules.cache", "modules.hashes",
                 "modules.textual_inversion", "modules.textual_inversion.textual_inversion"):  # fmt: skip
        sys.modules[name] = mock.MagicMock(name=name)
    devices = sys.modules["modules.devices"]
    devices.cpu, devices.device, devices.dtype = torch.device("cpu"), torch.device("cpu"), torch.float32
    sys.modules["modules"].devices = devices
    sys.modules["modules.sd_models"].read_state_dict = lambda filename: load_file(filename)
    sys.modules["modules"].sd_models = sys.modules["modules.sd_models"]
    sys.path.insert(0, str(root / "extensions-builtin" / "Lora"))
    import networks

    unet = _tree(native)
    mapping = {("diffusion_model." + n).replace(".", "_"): m for n, m in unet.named_modules() if n}
    sd_model = types.SimpleNamespace(network_layer_mapping=mapping, is_sdxl=True)
    networks.shared.sd_model = sd_model
    on_disk = types.SimpleNamespace(filename=case["lora"], read_hash=lambda: None)
    net = networks.load_network("case", on_disk)
    net.te_multiplier, net.unet_multiplier, net.dyn_dim = 1.0, float(case.get("strength", 1.0)), None
    lora = load_file(case["lora"])
    prefixes = {k.partition(".")[0] for k in lora}
    module_of = {id(m): n for n, m in unet.named_modules()}
    before = {k: v.detach().clone() for k, v in unet.state_dict().items()}
    errors = []
    with torch.no_grad():
        for key, module in net.modules.items():
            layer = module.sd_module
            try:
                updown, _ = module.calc_updown(layer.weight)
                layer.weight += updown
            except RuntimeError as e:  # network_apply_weights logs and skips such a layer
                errors.append(f"{key}: {e}")
    after = {k: v.detach() for k, v in unet.state_dict().items()}
    problems, worst = compare(before, after, expected, float(case.get("tolerance", 1e-4)))
    matched = {m.network_key.partition(".")[0] for m in net.modules.values()}
    return {
        "unmatched": sorted(prefixes - matched),
        "skipped": errors,
        "patched_weights": len({module_of[id(m.sd_module)] for m in net.modules.values()}),
        "expected_weights": len(expected),
        "problems": problems[:20],
        "worst_relative_error": worst,
    }


def run_lycoris(
    forge_root: Path, case: dict[str, Any], base: dict[str, Any], change: dict[str, Any]
) -> dict[str, Any]:
    """LyCORIS' own loaders: `lycoris_` files by `create_lycoris_from_weights` on the diffusers
    model (SimpleTuner's spelling, which the wrapper's "lycoris" prefix reads), `lora_unet_` files
    by `lycoris.kohya.create_network_from_weights` on the model at the kohya checkpoint's names
    (SGM for SDXL, BFL for FLUX.1: Forge's tables, as run_forge). Each loaded module is applied
    (`apply_to`, LyCORIS' inference path) and every linear's weight read from its forward on the
    identity."""
    import torch
    from safetensors.torch import load_file

    lora = load_file(case["lora"])
    strength = float(case.get("strength", 1.0))
    prefixes = {k.partition(".")[0] for k in lora}
    if all(p.startswith("lycoris_") for p in prefixes):
        from lycoris import create_lycoris_from_weights

        weights, expected = base, {k: v for k, v in change.items() if bool(v.abs().max() > 0)}
        model = _tree(weights)
        network, _ = create_lycoris_from_weights(strength, case["lora"], model, dict(lora))
        modules = network.loras
    else:
        sys.path.insert(0, str(forge_root))
        from lycoris.kohya import create_network_from_weights
        from packages_3rdparty.comfyui_lora_collection import utils

        weights, _ = forge_native(utils, case, base)
        moved, _ = forge_native(utils, case, {k: v + change.get(k, 0) for k, v in base.items()})
        expected = {k: moved[k] - v for k, v in weights.items() if not torch.equal(moved[k], v)}
        model = _tree(weights)
        network, _ = create_network_from_weights(strength, case["lora"], None, None, model, dict(lora), True)
        modules = network.unet_loras
    names = {id(m): n for n, m in model.named_modules()}
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    errors = []
    for module in modules:
        module.multiplier = strength
        module.apply_to()
    after = dict(before)
    with torch.no_grad():
        for module in modules:
            layer = module.org_module[0]
            name = names[id(layer)]
            w = layer.weight
            if w.dim() != 2:
                errors.append(f"{name}: not a linear (not read here)")
                continue
            eye = torch.eye(w.shape[1])  # [in, in]
            out = layer(eye)  # [in, out]
            if layer.bias is not None:
                out = out - layer.bias
            after[f"{name}.weight"] = out.T.contiguous()  # [out, in]
    problems, worst = compare(before, after, expected, float(case.get("tolerance", 1e-4)))
    matched = {m.lora_name for m in modules}
    return {
        "unmatched": sorted(prefixes - matched),
        "skipped": errors,
        "patched_weights": len(modules),
        "expected_weights": len(expected),
        "problems": problems[:20],
        "worst_relative_error": worst,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loader", choices=["forge", "a1111", "lycoris"], required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument(
        "--forge-root", type=Path, default=None, help="a1111: Forge's tree, for its SGM name table"
    )
    parser.add_argument("case_dir", type=Path)
    args = parser.parse_args()
    from safetensors.torch import load_file

    case = json.loads((args.case_dir / "case.json").read_text())
    base = load_file(str(args.case_dir / "base.safetensors"))
    change = load_file(str(args.case_dir / "expected.safetensors"))
    if args.loader == "forge":
        result = run_forge(args.root, case, base, change)
    elif args.loader == "lycoris":
        result = run_lycoris(args.forge_root, case, base, change)
    else:
        result = run_a1111(args.root, args.forge_root, case, base, change)
    result |= {"family": case["family"], "case": case.get("case"), "loader": args.loader}
    result["ok"] = (
        not result.get("skipped_case")
        and not result["unmatched"]
        and not result["skipped"]
        and not result["problems"]
        and result["patched_weights"] >= result["expected_weights"] > 0
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
