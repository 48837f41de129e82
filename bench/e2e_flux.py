"""End-to-end FLUX.1 run at real size through the product's training entry point, timed per phase.

`build DIR`: a FLUX.1-dev pipeline folder with random weights of the released configs (12B MM-DiT
with guidance embeddings, T5-XXL encoder, CLIP-L text model, the 16-channel VAE; the tokenizers
are lorastudio's tiny ones: ids stay inside the real vocabularies) saved as an ordinary diffusers
pipeline folder (bf16 safetensors), plus a dataset of N 1024 px images with captions.

`run DIR`: `lorastudio train`'s path (the CLI's config loader, then training.loop.train with an
event sink instead of the console display) on that folder: 1024 px, batch 1, the engine's
defaults (compile, attention_backend auto: its probe picks cuDNN or FA4), sample previews and a
checkpoint every SAVE_EVERY steps. Prints and writes (DIR/e2e.json) the phases: weights load per
component, caption encoding, latent cache, attention probe, plan measurement, first step (compile
included), steady samples/s, sample round, checkpoint write, total; peak VRAM and host RAM.

usage (device): python -m bench.e2e_flux build /tmp/e2e && python -m bench.e2e_flux run /tmp/e2e [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

SAVE_EVERY = 100  # steps between sample rounds and checkpoints (and the export at the end)
IMAGES = 16


def build(root: Path, seed: int = 0) -> dict[str, float]:
    """Write root/flux (the pipeline) and root/data (IMAGES images + .txt captions)."""
    import numpy as np
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from PIL import Image
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    from lorastudio.tiny import tokenizers as toks

    t0 = time.monotonic()
    torch.manual_seed(seed)
    tokenizer, tokenizer_2 = toks.clip_tokenizer(), toks.t5_tokenizer()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            text_encoder = CLIPTextModel(
                CLIPTextConfig(  # openai/clip-vit-large-patch14's text model
                    vocab_size=49408,
                    hidden_size=768,
                    intermediate_size=3072,
                    num_attention_heads=12,
                    num_hidden_layers=12,
                    max_position_embeddings=77,
                    hidden_act="quick_gelu",
                    projection_dim=768,
                    bos_token_id=tokenizer.bos_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id,
                )
            )
            text_encoder_2 = T5EncoderModel(
                T5Config(  # google/t5-v1_1-xxl's encoder
                    vocab_size=32128,
                    d_model=4096,
                    d_kv=64,
                    d_ff=10240,
                    num_layers=24,
                    num_heads=64,
                    feed_forward_proj="gated-gelu",
                    is_encoder_decoder=False,
                    use_cache=False,
                    tie_word_embeddings=False,
                    pad_token_id=tokenizer_2.pad_token_id,
                    eos_token_id=tokenizer_2.eos_token_id,
                    decoder_start_token_id=tokenizer_2.pad_token_id,
                )
            )
            transformer = FluxTransformer2DModel(guidance_embeds=True)  # FLUX.1-dev: 19 + 38 blocks
            vae = AutoencoderKL(
                in_channels=3,
                out_channels=3,
                down_block_types=["DownEncoderBlock2D"] * 4,
                up_block_types=["UpDecoderBlock2D"] * 4,
                block_out_channels=[128, 256, 512, 512],
                layers_per_block=2,
                latent_channels=16,
                sample_size=1024,
                scaling_factor=0.3611,
                shift_factor=0.1159,
                use_quant_conv=False,
                use_post_quant_conv=False,
            )
    finally:
        torch.set_default_dtype(previous)
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000,
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    pipe = FluxPipeline(scheduler, vae, text_encoder, tokenizer, text_encoder_2, tokenizer_2, transformer)
    built = time.monotonic()
    pipe.save_pretrained(root / "flux", safe_serialization=True, max_shard_size="10GB")
    saved = time.monotonic()
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:1024, 0:1024] / 1024.0
    for i in range(IMAGES):
        a, b, c = rng.uniform(0.5, 6.0, 3)
        img = np.stack([np.sin(a * xx + i), np.cos(b * yy), np.sin(c * (xx + yy))], -1)  # [H, W, 3]
        Image.fromarray(((img + 1) * 127.5).astype(np.uint8)).save(data / f"img{i:02d}.png")
        (data / f"img{i:02d}.txt").write_text(f"a test pattern number {i}, waves and colours")
    params = sum(p.numel() for m in (text_encoder, text_encoder_2, transformer, vae) for p in m.parameters())
    bytes_on_disk = sum(f.stat().st_size for f in (root / "flux").rglob("*") if f.is_file())
    return {
        "build_s": round(built - t0, 1),
        "save_s": round(saved - built, 1),
        "params_b": round(params / 1e9, 2),
        "pipeline_gb": round(bytes_on_disk / 1e9, 1),
    }


class Recorder:
    """The event sink: every event with its time since the run started (seconds)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[tuple[float, Any]] = []

    def __call__(self, event: Any) -> None:
        self.events.append((time.monotonic() - self.t0, event))
        if event.type != "progress" or event.step in (1, 2) or event.step % 50 == 0:
            print(f"{self.events[-1][0]:8.1f} s  {event.type} {_brief(event)}", flush=True)


def _brief(event: Any) -> str:
    data = event.model_dump()
    data.pop("type", None)
    data.pop("trials", None)
    return json.dumps(data, default=str)[:240]


def timed_calls(module: Any, name: str, log: list[float]) -> None:
    """Wrap module.name so that each call's seconds go to `log` (bench instrumentation only)."""
    real = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.monotonic()
        try:
            return real(*args, **kwargs)
        finally:
            log.append(time.monotonic() - t)

    setattr(module, name, wrapper)


def run(
    root: Path,
    steps: int,
    device: str = "cuda",
    resolution: int = 1024,
    save_every: int = SAVE_EVERY,
    attention: str = "auto",
) -> dict[str, Any]:
    import torch

    from lorastudio.cli.train_cmd import load_config_file
    from lorastudio.config import parse_train_config
    from lorastudio.training import loop, optimize

    config = root / "train.json"
    config.write_text(
        json.dumps(
            {
                "family": "flux",
                "base_model": str(root / "flux"),
                "data_dir": str(root / "data"),
                "output_name": "e2e-flux",
                "resolution": resolution,
                "batch_size": 1,
                "steps": steps,
                "lora_rank": 16,
                "learning_rate": 1e-4,
                "save_every": save_every,
                "sample_every": save_every,
                "sample_prompts": ["a test pattern, waves and colours"],
                "sample_steps": 20,
                "attention_backend": attention,
            }
        )
    )
    cfg = parse_train_config(load_config_file(config))
    probe_s: list[float] = []
    save_s: list[float] = []
    timed_calls(loop, "choose_attention", probe_s)
    timed_calls(optimize, "save_checkpoint", save_s)
    rec = Recorder()
    result = loop.train(cfg, rec, device=device)
    total = time.monotonic() - rec.t0
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else 0.0
    return report(rec.events, total, probe_s, save_s, result, peak)


def report(
    events: list[tuple[float, Any]],
    total: float,
    probe_s: list[float],
    save_s: list[float],
    result: Any,
    peak: float,
) -> dict[str, Any]:
    """The phase table from the recorded events."""

    def first(kind: str, **match: Any) -> tuple[float, Any] | None:
        return next(
            (
                (t, e)
                for t, e in events
                if e.type == kind and all(getattr(e, k) == v for k, v in match.items())
            ),
            None,
        )

    loads = {e.component: round(e.seconds, 1) for _, e in events if e.type == "model_load_completed"}
    phases: dict[str, Any] = {"weights_load_s": loads, "weights_load_total_s": round(sum(loads.values()), 1)}
    for phase, after in (("conditioning", "text_encoders"), ("latents", "vae")):  # encoding, after the load
        start = first("model_load_completed", component=after)
        done = [t for t, e in events if e.type == "preparing" and e.phase == phase and e.done == e.total]
        if start and done:
            phases[f"{phase}_s"] = round(done[-1] - start[0], 1)
    loaded = first("model_load_completed", component="denoiser")
    phases["attention_probe_s"] = round(sum(probe_s), 1)
    plan = first("plan_chosen")
    if loaded and plan:  # the plan's measurement (if any) and the attention probe
        phases["plan_and_probe_s"] = round(plan[0] - loaded[0], 1)
    if plan:
        phases["plan"] = {
            k: getattr(plan[1], k)
            for k in ("base_precision", "attention_backend", "decided_by", "fused_projections", "fallbacks")
            if hasattr(plan[1], k)
        }
    progress = [(t, e) for t, e in events if e.type == "progress"]
    if plan and progress:
        phases["first_step_s"] = round(progress[0][0] - plan[0], 1)  # compile included
        phases["time_to_first_step_s"] = round(progress[0][0], 1)
        phases["steady_samples_per_s"] = progress[-1][1].samples_per_second
        phases["peak_memory_gb_event"] = progress[-1][1].peak_memory_gb
        by_step = {e.step: t for t, e in progress}
        rounds = [
            round(t - by_step[e.step], 1) for t, e in events if e.type == "sample_ready" and e.step in by_step
        ]
        phases["sample_round_s"] = rounds
    phases["checkpoint_write_s"] = [round(s, 2) for s in save_s]
    phases["total_s"] = round(total, 1)
    phases["steps_run"] = result.steps_run
    phases["peak_vram_gib"] = round(peak, 1)
    phases["peak_host_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 1)
    phases["final_loss"] = result.losses[-1] if result.losses else None
    return phases


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["build", "run"])
    parser.add_argument("root", type=Path)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--device", default="cuda", help="cpu: a smoke test on a pipeline folder put there by hand"
    )
    parser.add_argument("--resolution", type=int, default=1024)
    parser.add_argument("--attention", default="auto", help="attention_backend of the run")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    if args.what == "build":
        out = build(args.root)
    else:
        every = min(SAVE_EVERY, max(1, args.steps // 2))
        out = run(args.root, args.steps, args.device, args.resolution, every, args.attention)
    print(json.dumps(out), flush=True)
    with (args.root / f"e2e-{args.what}-{args.attention}.json").open("w") as fh:
        json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
