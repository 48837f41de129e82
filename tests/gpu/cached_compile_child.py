"""Child of tests/gpu/test_compile_gpu.py::test_a_cudnn_flux_graph_comes_from_aotautograds_cache_in_a_second_process:
the tiny FLUX.1 with LoRA, cuDNN's contiguous-gradient hooks and regional compile, one forward and
backward in bf16 under cuDNN SDPA; prints one JSON line: the loss, the LoRA gradients' norm,
AOTAutograd's cache counters, Dynamo's saved output's counters and the frames Dynamo's ordinary
path compiled in this process."""

from __future__ import annotations

import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from lorastudio import families
from lorastudio.config import TrainConfig
from lorastudio.tiny.models import build
from lorastudio.training.adapters.lora import add_lora, lora_config_for
from lorastudio.training.speed import precompile
from lorastudio.training.speed.attention import contiguous_attention_grads
from lorastudio.training.speed.compile import compile_denoiser


def main() -> None:
    dev = torch.device("cuda")
    denoiser = build("flux", 0).transformer.to(dev, torch.bfloat16).train()
    cfg = TrainConfig(family="flux", base_model="tiny", data_dir="tiny", lora_rank=4, lora_alpha=4.0)
    torch.manual_seed(0)
    params = add_lora(denoiser, lora_config_for(cfg, families.get("flux").spec.lora_targets))
    with torch.no_grad():
        for p in params:
            p.normal_(std=0.05)
    contiguous_attention_grads(denoiser)
    compile_denoiser(denoiser, params)
    g = torch.Generator(device=dev).manual_seed(1)
    c = denoiser.config
    kwargs = dict(
        hidden_states=torch.randn(1, 64, c.in_channels, device=dev, dtype=torch.bfloat16, generator=g),
        encoder_hidden_states=torch.randn(1, 8, c.joint_attention_dim, device=dev, dtype=torch.bfloat16, generator=g),
        pooled_projections=torch.randn(1, c.pooled_projection_dim, device=dev, dtype=torch.bfloat16, generator=g),
        timestep=torch.tensor([0.5], device=dev), img_ids=torch.zeros(64, 3, device=dev),
        txt_ids=torch.zeros(8, 3, device=dev), return_dict=False,
    )  # fmt: skip
    if c.guidance_embeds:
        kwargs["guidance"] = torch.tensor([3.5], device=dev)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        out = denoiser(**kwargs)[0]  # [1, 64, C]
        loss = out.float().pow(2).mean()
        loss.backward()
    counters = torch._dynamo.utils.counters["aot_autograd"]
    grad_norm = float(torch.stack([p.grad.float().norm() for p in params]).norm())
    metrics = torch._dynamo.utils.compilation_time_metrics
    frames = sum(len(v) for k, v in metrics.items() if str(k).endswith("_compile.compile_inner"))
    print(
        json.dumps(
            {
                "loss": float(loss),
                "grad_norm": grad_norm,
                "aot": dict(counters),
                "precompile": dict(
                    precompile.COUNTERS
                ),  # Dynamo's saved output (training/speed/precompile.py)
                "dynamo_frames": frames,
            }
        )
    )


if __name__ == "__main__":
    main()
