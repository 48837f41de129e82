"""The ComfyUI half of bench/comfyui_check.py: runs ComfyUI's own LoRA loader on one LoRA file.

    python bench/comfyui_side.py --comfyui /path/to/ComfyUI CASE_DIR     (prints one JSON line)

Imports no lorastudio code: everything here is ComfyUI's (a checkout given by --comfyui, not
vendored) plus torch and safetensors. CASE_DIR (written by comfyui_check.py) holds case.json,
base.safetensors (the tiny denoiser's weights, diffusers names; for "native": "given", the
model's own names) and expected.safetensors (the weight change the trained adapter makes, peft's
merged weight minus the base per layer, same names). The file may be a LoRA or a LyCORIS DoRA /
LoHa / LoKr file: ComfyUI's loader picks its weight adapter (comfy/weight_adapter) per module.

What runs, all ComfyUI's code:
1. the model's weights in ComfyUI's names, by ComfyUI's own diffusers loading conversion:
   `comfy.utils.unet_to_diffusers` (SDXL, as `comfy.sd.load_diffusion_model_state_dict` does for a
   diffusers U-Net), `comfy.model_detection.convert_diffusers_mmdit` (FLUX.1, Chroma, Kontext, Z-Image),
   `comfy.utils.krea2_to_diffusers` (Krea 2: the table its lora.py maps diffusers names by), none
   for Qwen-Image (ComfyUI's model uses the diffusers names); FLUX.2 has no
   diffusers conversion in ComfyUI, so its BFL-named weights are given by the caller. The
   expected change is converted the same way: convert(base + change) - convert(base).
2. `comfy.sd.load_lora_for_models(model_patcher, None, lora, 1.0, 0)`: the LoraLoaderModelOnly
   node's call (model_lora_keys_unet + lora_convert.convert_lora + lora.load_lora + add_patches),
   then `ModelPatcher.patch_weight_to_device(key, return_weight=True)` for each patched weight
   (lora.calculate_weight, the LoRA adapter's strength rule).
3. every "lora key not loaded" / "NOT LOADED" warning and every error ComfyUI logs (its weight
   adapters log a failed patch, e.g. a shape mismatch, and leave the weight as it was) is
   collected; the patched weight minus the original must equal the expected change on every
   layer within case.json's "tolerance" (relative to the layer's largest change, beyond the fp32
   rounding of the weight: `compare`), and nothing else may change.

The stub surface, and why: ComfyUI's model classes cannot be built at the tiny models' sizes
(its model detection and constructors assume real widths: head counts of hidden_size / 128,
Qwen-Image's 3072), so the model handed to the loader is an instance of ComfyUI's real class
(comfy.model_base.SDXL / Flux / Flux2 / Chroma / QwenImage / Lumina2 / Krea2; lora.py dispatches on it
with isinstance) made without its constructor, holding the converted weights under
`diffusion_model.` and the unet_config ComfyUI's own `detect_unet_config` reads from them (SDXL:
written by the caller and checked to name every weight). torchvision and torchaudio, when not
installed, are replaced by an absent module (_ABSENT_IF_MISSING: only models never built here
use them). Model management runs for real with --cpu.
With case.json's "clip" (bench/comfyui_te_check.py) the text encoders load too: a comfy.sd.CLIP
made without its constructor whose cond_stage_model holds te_base.safetensors at ComfyUI's names
(`text_encoders`), handed to load_lora_for_models beside the model (the LoraLoader node's call,
model_lora_keys_clip included); its patched weights are compared with te_expected.safetensors
like the denoiser's.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import json
import logging
import sys
import types
from pathlib import Path
from typing import Any


class _Absent(types.ModuleType):
    """A module that is not installed: every use raises (see the module docstring)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _Absent(f"{self.__name__}.{name}")
        sub.__spec__ = importlib.machinery.ModuleSpec(sub.__name__, None, is_package=True)
        sub.__path__ = []  # a package: `import absent.sub.module` goes on through _AbsentFinder
        sys.modules[sub.__name__] = sub
        return sub

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.__name__} is not available in this check")


# packages only models never built here import (video / audio models), replaced by an absent
# module (and absent submodules) when not installed: torchvision (only CUDA wheels exist for this
# CPU torch), and torchaudio (newer ComfyUI's comfy.sd imports its audio VAEs at module level)
_ABSENT_IF_MISSING = ("torchvision", "torchaudio")


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports every module under `roots` (a package not installed) as an _Absent module."""

    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(
        self, name: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Absent(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def import_comfy(root: Path) -> types.SimpleNamespace:
    """Import ComfyUI's modules from the checkout at `root` (on the CPU)."""
    sys.path.insert(0, str(root))
    missing = set()
    for package in _ABSENT_IF_MISSING:
        try:
            importlib.import_module(package)
        except (ImportError, RuntimeError, OSError):
            missing.add(package)
    if missing:
        sys.meta_path.insert(0, _AbsentFinder(missing))
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    import comfy.clip_model
    import comfy.lora
    import comfy.lora_convert
    import comfy.model_base
    import comfy.model_detection
    import comfy.model_management
    import comfy.model_patcher
    import comfy.ops
    import comfy.sd
    import comfy.text_encoders.t5
    import comfy.utils

    return types.SimpleNamespace(
        lora=comfy.lora,
        clip_model=comfy.clip_model,
        t5=comfy.text_encoders.t5,
        ops=comfy.ops,
        base=comfy.model_base,
        detection=comfy.model_detection,
        patcher=comfy.model_patcher,
        sd=comfy.sd,
        utils=comfy.utils,
    )


def _tree(weights: dict[str, Any]) -> Any:
    """An nn.Module holding `weights` at their dotted names (no forward)."""
    import torch

    root = torch.nn.Module()
    for name, value in weights.items():
        *path, leaf = name.split(".")
        module = root
        for part in path:
            if part not in module._modules:
                module.add_module(part, torch.nn.Module())
            module = module._modules[part]
        module.register_parameter(leaf, torch.nn.Parameter(value.clone(), requires_grad=False))
    return root


def native_weights(comfy: Any, case: dict[str, Any], weights: dict[str, Any]) -> dict[str, Any]:
    """`weights` (diffusers names) in ComfyUI's names, by ComfyUI's diffusers conversion."""
    kind = case["native"]
    weights = {k: v.clone() for k, v in weights.items()}  # ComfyUI's conversion writes into its input
    if kind == "given" or kind == "identity":
        return dict(weights)
    if kind == "krea2":  # ComfyUI's own diffusers -> Krea 2 table (the one lora.py maps by)
        mapping = comfy.utils.krea2_to_diffusers(case["unet_config"])
        return {mapping[k]: v for k, v in weights.items() if k in mapping}
    if kind == "unet":
        mapping = comfy.utils.unet_to_diffusers(case["unet_config"])
        missing = sorted(k for k in weights if k not in mapping)
        if missing:
            raise SystemExit(f"unet_config does not name {len(missing)} weights, e.g. {missing[:3]}")
        return {mapping[k]: v for k, v in weights.items()}
    converted = comfy.detection.convert_diffusers_mmdit(dict(weights), "")
    if converted is None:
        raise SystemExit("ComfyUI's convert_diffusers_mmdit does not recognise this model")
    return converted


def _encoder_names(comfy: Any, kind: str, config: dict[str, Any]) -> set[str]:
    """The state-dict names of ComfyUI's own encoder module of `kind` (clip_l / clip_g:
    comfy.clip_model.CLIPTextModel; t5xxl: comfy.text_encoders.t5.T5) built on the meta device
    from the tiny encoder's transformers config (ComfyUI's own configs are that format)."""
    import torch

    ops = comfy.ops.disable_weight_init
    if kind == "t5xxl":
        # transformers names the tanh GELU "gelu_new", ComfyUI (t5_config_xxl.json) "gelu_pytorch_tanh"
        config = {"is_gated_act": True, "model_type": "t5", **config, "dense_act_fn": "gelu_pytorch_tanh"}
        module = comfy.t5.T5(config, torch.float32, "meta", ops)
    else:
        module = comfy.clip_model.CLIPTextModel(config, torch.float32, "meta", ops)
    return set(module.state_dict())


def text_encoders(comfy: Any, case: dict[str, Any], case_dir: Path) -> tuple[Any, dict[str, Any]]:
    """(a comfy.sd.CLIP whose cond_stage_model holds the tiny encoders' weights, {ComfyUI weight
    name: expected change}) from te_base / te_expected.safetensors ("<component>.<HF name>").
    Each encoder sits at "<kind>.transformer.<HF name>" (clip_l / clip_g / t5xxl: the names
    ComfyUI's SDXL and FLUX.1 text-encoder models give their weights, which model_lora_keys_clip
    reads), every changed weight checked to be a name of ComfyUI's own encoder module
    (_encoder_names); the CLIP object is made without its constructor (it would build the real
    encoders and tokenizers), holding what load_lora_for_models and clone use."""
    from safetensors.torch import load_file

    base, change = (
        load_file(str(case_dir / "te_base.safetensors")),
        load_file(str(case_dir / "te_expected.safetensors")),
    )
    weights, expected = {}, {}
    for component, spec in case["clip"].items():
        names = _encoder_names(comfy, spec["kind"], spec["config"])
        own = f"{component}."
        for key, value in base.items():
            if not key.startswith(own):
                continue
            name = key.removeprefix(own)
            moved = key in change and bool(change[key].abs().max() > 0)
            if name not in names:
                if moved:
                    raise SystemExit(f"ComfyUI's {spec['kind']} has no weight {name} (trained: {key})")
                continue
            weights[f"{spec['kind']}.transformer.{name}"] = value
            if moved:
                expected[f"{spec['kind']}.transformer.{name}"] = change[key]
    cond = _tree(weights)
    clip = comfy.sd.CLIP(no_init=True)
    clip.cond_stage_model = cond
    clip.patcher = comfy.patcher.ModelPatcher(cond, load_device=cond_device(), offload_device=cond_device())
    clip.tokenizer, clip.layer_idx, clip.tokenizer_options = None, None, {}
    clip.use_clip_schedule, clip.apply_hooks_to_conds = False, None
    return clip, expected


def cond_device() -> Any:
    import torch

    return torch.device("cpu")


def build_model(comfy: Any, case: dict[str, Any], cls: type, native: dict[str, Any]) -> Any:
    """An instance of ComfyUI's model class `cls` made without its constructor (module
    docstring) holding the `native` weights under `diffusion_model.` and the unet_config
    ComfyUI's detect_unet_config reads from them (or the case's, checked for SDXL)."""
    import torch

    unet_config = case.get("unet_config") or comfy.detection.detect_unet_config(native, "")
    if case["native"] == "unet":  # the written config must be the one ComfyUI reads off the weights
        read = comfy.detection.detect_unet_config(native, "")
        if comfy.utils.unet_to_diffusers(read) != comfy.utils.unet_to_diffusers(unet_config):
            raise SystemExit(f"detect_unet_config reads another U-Net: {read}")
    model = cls.__new__(cls)
    torch.nn.Module.__init__(model)
    model.model_config = types.SimpleNamespace(unet_config=unet_config)
    model.diffusion_model = _tree(native)
    model.device = torch.device("cpu")
    return model


def key_map(comfy: Any, case_dir: Path) -> dict[str, Any]:
    """{"family", "keys": {LoRA layer name: the model weight it patches}} of ComfyUI's own key
    map (`comfy.lora.model_lora_keys_unet`) for the case's tiny model: every layer name a LoRA,
    DoRA, LoHa or LoKr file may use on it. A target that is a slice of a fused weight (FLUX's
    q / k / v) is written "<weight>[<dim>:<start>+<length>]"."""
    from safetensors.torch import load_file

    case = json.loads((case_dir / "case.json").read_text())
    cls = getattr(comfy.base, case["model_class"], None)
    if cls is None:
        return {"family": case["family"], "skipped": f"this ComfyUI has no {case['model_class']} model"}
    native = native_weights(comfy, case, load_file(str(case_dir / "base.safetensors")))
    keys = comfy.lora.model_lora_keys_unet(build_model(comfy, case, cls, native), {})
    out = {}
    for key, target in keys.items():
        if isinstance(target, tuple):  # (weight, (dim, start, length) or None[, a function])
            where = "" if target[1] is None else "[{}:{}+{}]".format(*target[1][:3])
            target = f"{target[0]}{where}{'+fn' if len(target) > 2 else ''}"
        out[key] = str(target)
    return {"family": case["family"], "keys": dict(sorted(out.items()))}


def run_case(comfy: Any, case_dir: Path) -> dict[str, Any]:
    """Load the case's LoRA with ComfyUI's loader; compare every patched weight (module docstring)."""
    import torch
    from safetensors.torch import load_file

    case = json.loads((case_dir / "case.json").read_text())
    base = load_file(str(case_dir / "base.safetensors"))
    change = load_file(str(case_dir / "expected.safetensors"))
    cls = getattr(comfy.base, case["model_class"], None)
    if cls is None:  # an older ComfyUI (Krea 2 came in v0.2x)
        return {"family": case["family"], "case": case.get("case", "lora"), "ok": None,
                "skipped": f"this ComfyUI has no {case['model_class']} model"}  # fmt: skip
    if case["native"] == "krea2":  # a trained layer ComfyUI's table does not name is a failure, not dropped
        table = comfy.utils.krea2_to_diffusers(case["unet_config"])
        unnamed = sorted(k for k, v in change.items() if k not in table and bool(v.abs().max() > 0))
        if unnamed:
            raise SystemExit(f"ComfyUI's krea2_to_diffusers does not name trained weights {unnamed[:3]}")
    native = native_weights(comfy, case, base)
    moved = native_weights(comfy, case, {k: v + change.get(k, 0) for k, v in base.items()})
    expected = {k: moved[k] - v for k, v in native.items() if not torch.equal(moved[k], v)}
    model = build_model(comfy, case, cls, native)
    patcher = comfy.patcher.ModelPatcher(model, load_device=model.device, offload_device=model.device)

    lora = load_file(case["lora"])
    tolerance = float(case.get("tolerance", 1e-4))
    warnings: list[str] = []
    handler = _Collect(warnings)
    logging.getLogger().addHandler(handler)
    clip, clip_expected = (None, {}) if "clip" not in case else text_encoders(comfy, case, case_dir)
    try:  # patch_weight_to_device is where ComfyUI's adapters compute (and log a failed patch)
        patched, patched_clip = comfy.sd.load_lora_for_models(
            patcher, clip, lora, case.get("strength", 1.0), case.get("strength", 1.0) if clip else 0
        )
        prefixed = {"diffusion_model." + k: v for k, v in expected.items()}
        errors, worst = compare(comfy, model, patched, prefixed, tolerance)
        if clip is not None:
            clip_errors, clip_worst = compare(
                comfy, clip.cond_stage_model, patched_clip.patcher, clip_expected, tolerance
            )
            errors, worst = errors + clip_errors, max(worst, clip_worst)
    finally:
        logging.getLogger().removeHandler(handler)
    return {
        "family": case["family"],
        "case": case.get("case", "lora"),
        "lora": case["lora"],
        "file_keys": case.get("file_keys", {}),
        "tolerance": tolerance,
        "lora_keys": len(lora),
        "patched_weights": len(patched.patches),
        "expected_weights": len(expected),
        "patched_text_encoder_weights": len(patched_clip.patcher.patches) if clip is not None else 0,
        "expected_text_encoder_weights": len(clip_expected),
        "text_encoder_patched": sorted(patched_clip.patcher.patches) if clip is not None else [],
        "conv_weights": sum(1 for v in expected.values() if v.dim() == 4),
        "not_loaded": [w for w in warnings if "not loaded" in w.lower()],
        "comfy_errors": [w for w in warnings if "not loaded" not in w.lower()],
        "errors": errors,
        "worst_relative_error": worst,
        "ok": not warnings and not errors and len(expected) + len(clip_expected) > 0,
    }


def compare(
    comfy: Any, model: Any, patched: Any, expected: dict[str, Any], tolerance: float
) -> tuple[list[str], float]:
    """(problems, worst relative error) of ComfyUI's patched weights against `expected`
    ({"diffusion_model.<name>": change}): every changed weight patched; each patch equal to its
    change within `tolerance` x the change's largest entry plus the fp32 rounding of W + change
    (4 ulps of the weight's largest entry: a layer the 3 steps barely moved differs by that
    rounding alone); a layer left unchanged patched by no more than that rounding. The worst
    relative error is the largest (difference - rounding) / the change's largest entry."""
    import torch

    errors, worst = [], 0.0
    for key in sorted(set(patched.patches) | set(expected)):
        if key not in patched.patches:
            errors.append(f"{key}: the adapter changes it, ComfyUI does not patch it")
            continue
        before = comfy.utils.get_attr(model, key).detach().float()
        after = patched.patch_weight_to_device(key, return_weight=True).float()
        want = expected.get(key, torch.zeros_like(before)).float()
        diff = (after - before - want).abs().max().item()
        scale = want.abs().max().item()
        rounding = 4 * torch.finfo(torch.float32).eps * before.abs().max().item()
        if scale == 0.0:
            if diff > rounding:
                errors.append(f"{key}: an unchanged layer is patched by up to {diff:.3g}")
            continue
        worst = max(worst, max(diff - rounding, 0.0) / scale)
        if diff > tolerance * scale + rounding:
            errors.append(
                f"{key}: patched change differs from the trained one by {diff:.3g} (max {scale:.3g})"
            )
    return errors, worst


class _Collect(logging.Handler):
    """Collects ComfyUI's "lora key not loaded" / "NOT LOADED" warnings and its logged errors."""

    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "not loaded" in message.lower() or record.levelno >= logging.ERROR:
            self.sink.append(message)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui", type=Path, required=True, help="a ComfyUI checkout (its root folder)")
    parser.add_argument("--key-map", action="store_true", help="print ComfyUI's key map of the case's model")
    parser.add_argument("case_dir", type=Path)
    args = parser.parse_args()
    comfy = import_comfy(args.comfyui)
    print(json.dumps(key_map(comfy, args.case_dir) if args.key_map else run_case(comfy, args.case_dir)))


if __name__ == "__main__":
    main()
