"""The ComfyUI half of bench/comfyui_trainer_check.py: a LoRA file named as ComfyUI's own trainer
node names its files, for the model of a case folder.

    python bench/comfyui_trainer_side.py --comfyui /path/to/ComfyUI CASE_DIR OUT.safetensors

Imports no lorastudio code (like comfyui_side.py, whose model loading it uses: the tiny
denoiser's base.safetensors in ComfyUI's names by ComfyUI's own conversion, `native_weights`).
The naming restates comfy_extras/nodes_train.py (read at ComfyUI v0.33.0+, upstream de6b062f):
TrainLoraNode gives every layer `n` of `model.named_modules()` that has a `weight_function` (each
comfy.ops layer: Linear, Conv, the norms) its adapter's parameters as `{n}.{parameter}`, and
SaveLoRA writes that dict as it is, in the node's lora_dtype (bf16 by default):
  a weight of 2+ dims: LoRAAdapter.create_train's LoraDiff, `{n}.lora_up.weight` [out, r],
      `{n}.lora_down.weight` [r, in x kernel] (a conv's kernel flattened: its layers are
      Linear) and `{n}.alpha` (a Parameter, 1.0 at the start, in the optimizer with the rest);
  a 1-D weight (a norm's): BiasDiff, `{n}.diff` of the weight's shape;
  a bias: BiasDiff, `{n}.diff_b` of the bias's shape.
`n` is `diffusion_model.<ComfyUI's module name>`. The layers are taken here from the model's state
dict in ComfyUI's names (a `.weight` / `.bias` entry: a layer's), not by building ComfyUI's model
(see comfyui_side.py: its constructors cannot build the tiny sizes); a parameter of another name
(FLUX's RMSNorm `scale`, Lumina's pad tokens) belongs to no comfy.ops layer and gets nothing, as
in the trainer. The values are random (seeded): trained values, not zeros, so each one shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # comfyui_side, run as a script beside this one
import comfyui_side  # noqa: E402

RANK = 4


def trainer_file(native: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """{key: bf16 tensor} of a trainer-node file for the model weights `native` (ComfyUI's
    names, without `diffusion_model.`), as the module docstring says."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for key, value in sorted(native.items()):
        module, _, param = key.rpartition(".")
        n = f"diffusion_model.{module}"
        if param == "weight" and value.dim() >= 2:
            inputs = value[0].numel()  # in x kernel
            out[f"{n}.lora_up.weight"] = 0.1 * torch.randn(value.shape[0], RANK, generator=g)  # [out, r]
            out[f"{n}.lora_down.weight"] = 0.1 * torch.randn(RANK, inputs, generator=g)  # [r, in x k]
            out[f"{n}.alpha"] = torch.tensor(1.0 + torch.rand(1, generator=g).item())  # trained off 1.0
        elif param == "weight":
            out[f"{n}.diff"] = 0.1 * torch.randn(value.shape, generator=g)  # a norm weight's
        elif param == "bias":
            out[f"{n}.diff_b"] = 0.1 * torch.randn(value.shape, generator=g)
    return {k: v.to(torch.bfloat16).contiguous() for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui", type=Path, required=True, help="a ComfyUI checkout (its root folder)")
    parser.add_argument("case_dir", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    from safetensors.torch import load_file, save_file

    comfy = comfyui_side.import_comfy(args.comfyui)
    case = json.loads((args.case_dir / "case.json").read_text())
    if getattr(comfy.base, case["model_class"], None) is None:
        print(json.dumps({"skipped": f"this ComfyUI has no {case['model_class']} model"}))
        return
    native = comfyui_side.native_weights(comfy, case, load_file(str(args.case_dir / "base.safetensors")))
    tensors = trainer_file(native)
    save_file(tensors, str(args.out))
    print(json.dumps({"keys": len(tensors)}))


if __name__ == "__main__":
    main()
