"""The forecast of a run's peak host RAM, and the check that refuses a run that will not fit.

Computed from the configs and safetensors headers of the local pipeline, without loading it.
The engine runs its phases one after another (text encoders, then the VAE, then the denoiser),
so the peak is the process's base plus the largest phase:

    host = processes x (BASE_PROCESS_GB + max(conditioning, latents, denoiser))   (GB, 10^9 bytes)
    processes = num_gpus (a data-parallel run: every rank encodes its share of the images and
                holds the whole gathered cache)
    conditioning = text encoder weights + texts
    latents  = VAE weights + vae_act_gb + cache + texts
    denoiser = denoiser weights + LoRA (fp32 weights, grads, AdamW state) + activations + cache
               + texts + kept
    texts   the caption embeddings phase 1 keeps in RAM to the end (host_memory_texts.py: texts x
            tokens x the denoiser's text width x dtype bytes; 0 on disk)
    kept    on CPU, the components loaded beside the denoiser: the VAE where latents are encoded
            per step (whose latents phase is then the denoiser's weights and LoRA + kept +
            vae_act_gb: each step encodes beside the loaded denoiser), the text encoders with
            train_text_encoder

    vae_act_gb = fixed + (per_pixel + per_channel x c0) x pixels x K x dtype bytes
    c0      the VAE's channels at full resolution (vae/config.json block_out_channels[0], or the
            Qwen-Image / Wan VAE's base_dim x dim_mult[0]): the encoder's first level (and the
            decoder's last, for samples) holds c0 x H x W tensors, which dwarf everything else of
            a tiny model at high resolution
    fixed, per_pixel, per_channel   per VAE class (VAE_ACT_BY_CLASS; else the 2D AutoencoderKL's
            0, 0 and VAE_ACT_PER_CHANNEL_PIXEL): the Qwen-Image VAE's causal 3D convolutions pad
            and cache their inputs, holding more per pixel, part of it whatever c0 is (its fixed
            part builds up with the pixels: host_memory_vae.VAE_FIXED_RAMP)
    pixels  the largest bucket's W x H (the run's resolution when no bucket is known)
    K       images encoded in one VAE call: cache_variants per image when the latents are cached
            (in RAM or on disk), else the batch (encoded every step); 1 for a sample decode.
            Controls of their own sizes (control_resolution) are encoded slot by slot: pixels x K
            is then the largest call's, a slot's variants (cached) or one control (per step)
            at its size, or the targets'
    cache   the latent cache held in RAM (mean + std fp32 per variant, as
            training.inputs.latents.cache_bytes) when latent_cache puts it in memory (data/disk_cache.
            latent_mode); 0 on disk (a batch's shards are read per step) or encoded per step

On CPU the weights and activations live in host RAM (weights in the run's dtype: fp32 for auto).
A transformer denoiser's activations follow its tokens (`cpu_activation_gb`):

    activations = tokens x dtype bytes x (CPU_ACT_PER_TOKEN + CPU_ACT_PER_TOKEN_WIDTH x hidden x blocks)
                  x ACTIVATION_FACTOR of the checkpointing mode
    tokens  the micro-batch's image tokens at the largest bucket (W/(vae_scale x patch) x
            H/(vae_scale x patch) per sample, x (1 + controls): an edit sample's control tokens
            join the sequence)
    hidden, blocks  the denoiser config's width (num_attention_heads x attention_head_dim, or dim)
            and its repeated blocks (num_layers + num_single_layers, or n_layers + n_refiner_layers)

Measured on CPU (fp32, eager, one image, one step; bench/host_memory.py --phase denoiser resets
the peak RSS, /proc/self/clear_refs, when the denoiser phase starts, so that the VAE's larger peak
does not hide it), the denoiser phase's peak RSS:
    tiny denoiser (hidden x blocks)    1024 px (4,096 tokens)   2048 px (16,384 tokens)
    FLUX.1 (32 x 3 = 96)           0.535-0.545 GB (4 runs)  0.653-0.771 GB (5 runs)
    Qwen-Image (32 x 2 = 64)       0.525-0.567 (2)          0.695-0.765 (2)
    FLUX.2 (128 x 3 = 384)         0.791 (1)                1.552 (1)
The peak of one configuration varies by up to 15 % from run to run (threads, the allocator; the
child now returns the earlier phases' freed memory, malloc_trim, before the reset). Per token
(the 2048 px peak less the 1024 px one, over the 12,288 tokens between them) FLUX.1 holds ~14-17
KB, Qwen-Image ~14-16 KB, FLUX.2 ~62 KB. CPU_ACT_PER_TOKEN = 850 and CPU_ACT_PER_TOKEN_WIDTH = 38
(bytes per token per dtype byte) give base + denoiser phase at 1024 / 2048 px: FLUX.1 0.546 /
0.774 GB, Qwen-Image 0.526 / 0.694, FLUX.2 0.732 / 1.503: within -10 / +20 % of every measured
peak (the tolerance tests/unit/jobs/test_jobs_host_memory.py holds it to); FLUX.1 at 4096 px:
1.21 GB of activations (~1.1 GB measured before; the accelerator formula had 0.03). The fixed part
(the tokens' latents, positions, input and output projections) dominates a tiny model; how the
width part extrapolates to real-size transformers on CPU is not measured.
A U-Net's (SDXL: no token width in its config) follow its latent cells (`cpu_unet_activation_gb`):

    activations = cells x dtype bytes x CPU_UNET_ACT_PER_CELL_CHANNEL x c0u x ACTIVATION_FACTOR
    cells   the micro-batch's latent cells at the largest bucket; c0u the U-Net's
            block_out_channels[0] (its full-resolution level holds c0u x cells tensors)

fitted on the tiny SDXL (c0u 16) on CPU: its denoiser phase's peak at 1024 px, batch 1 (16,384
cells) 0.741 GB (bench/host_memory.py --phase denoiser), the whole run's at 1024 px, batch 4
(65,536 cells, the denoiser leads) 1.529 GB: 250 B per cell per channel per dtype byte gives
0.738 / 1.525 GB. Before, the accelerator formula (activations per billion parameters) gave the
3.4 MB U-Net ~0.01 GB: forecast 0.79 GB, `certain`, against 1.53 measured (-48 %). How c0u
extrapolates to the real SDXL (320) on CPU is not measured. Without a token width or a U-Net's
channels, the accelerator formula (jobs.preflight.estimate_memory_gb) is kept; a plan with
checkpointing scales the activations by ACTIVATION_FACTOR (unmeasured on CPU).

On CUDA the weights and activations live on the GPU and host RAM holds the process
(CUDA_PROCESS_GB: Python, torch, CUDA's libraries, Inductor), the latent cache, the blocks
swapped to the CPU and, while a component loads, the tensors its from_pretrained converts to
another dtype on the CPU (`vram_estimate.converted_bytes`: held together until the component
moves). A tensor stored in the dtype it loads in is a view of the file's pages, read and released
one at a time as the component moves to the GPU: measured (RESULTS note 34), FLUX.1's 23.8 GB
denoiser and 9.5 GB T5 from bf16 files peak at 3.77 GB of RSS for the whole run (the forecast
before this said 25.8 GB); on this host a 2.1 GB bf16 file read tensor by tensor and released
raised the peak RSS by 0.27 GB.

`certain`: the forecast refuses a run that does not fit (HostMemoryShort) only when it is measured:
on CPU, with the part of the peak that is not (activations from the accelerator formula, +-50 %,
or a checkpointed plan's) at most UNCERTAIN_SHARE of it. Otherwise (every CUDA forecast:
its base is three runs of one torch build) it warns.

VAE_ACT_PER_CHANNEL_PIXEL and BASE_PROCESS_GB are fitted on CPU runs of the tiny SDXL and FLUX.1
pipelines at 256-4096 px (bench/host_memory.py: within 3 % of the measured peak RSS at every
point; figures in RELIABILITY.md). The Qwen-Image VAE's row (VAE_ACT_BY_CLASS) is fitted on the
full runs' peak RSS of the tiny Qwen-Image (c0 16) at 256 / 1024 / 2048 px, 0.697 / 1.394 /
3.783 GB, and the tiny Qwen-Image-Edit (c0 2, its controls encoded at 1024 px), 1.004 GB
(bench/forecast_matrix.py, bench/RESULTS.md note 36); alone, that VAE encoding one image
held 631 B per pixel at c0 16 and 383 at c0 2 (fp32, 512 -> 1024 px): a part per pixel besides
the part per channel. Before, the VAE's channels were read as 128 (no block_out_channels) and the
2D constant applied: 3.0 / 3.01 / 10.61 GB forecast for those runs (+116 to +199 %).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio import families
from lorastudio.cgroup_limits import memory_limit, memory_room
from lorastudio.config_datasets import top_resolution
from lorastudio.data.disk_cache import latent_mode
from lorastudio.errors import HostMemoryShort
from lorastudio.jobs.host_memory_denoiser import (  # the denoiser's term (split out; names kept here)
    CPU_ACT_PER_TOKEN as CPU_ACT_PER_TOKEN,
)
from lorastudio.jobs.host_memory_denoiser import (
    CPU_ACT_PER_TOKEN_WIDTH as CPU_ACT_PER_TOKEN_WIDTH,
)
from lorastudio.jobs.host_memory_denoiser import (
    CPU_UNET_ACT_PER_CELL_CHANNEL as CPU_UNET_ACT_PER_CELL_CHANNEL,
)
from lorastudio.jobs.host_memory_denoiser import _token_width, cpu_activation_gb, cpu_unet_activation_gb
from lorastudio.jobs.host_memory_texts import kept_params, texts_encoded, texts_held_gb
from lorastudio.jobs.host_memory_vae import (  # the VAE's term (split out; names kept here)
    VAE_ACT_BY_CLASS as VAE_ACT_BY_CLASS,
)
from lorastudio.jobs.host_memory_vae import (
    VAE_ACT_PER_CHANNEL_PIXEL as VAE_ACT_PER_CHANNEL_PIXEL,
)
from lorastudio.jobs.host_memory_vae import (
    _vae_config,
    vae_act_gb,
)
from lorastudio.jobs.host_memory_vae import (
    _vae_first_channels as _vae_first_channels,
)

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.jobs.hardware import HostInfo
    from lorastudio.jobs.preflight import PlanValues
    from lorastudio.jobs.validation import ValidatedRun

# Peak RSS of a training process before any model is loaded (Python, torch, diffusers,
# transformers imported), measured on CPU: ~0.49 GB at 256 px on the tiny models.
BASE_PROCESS_GB = 0.47
# Peak RSS of a real-size run on a GPU host with nothing converted on the CPU, no cache to speak of
# and no swapped blocks (RESULTS notes 30, 31, 34: torch 2.11 cu130, compiled, H100/H200): FLUX.1
# 3.77-3.79 GB, FLUX.2 klein 9B 3.91 GB, Qwen-Image 4.42 GB; the weights, 9.5-57.7 GB, do not show.
CUDA_PROCESS_GB = 3.9
_SAFETENSORS_DTYPE = {"fp32": "F32", "bf16": "BF16", "fp16": "F16"}
# The share of the peak a forecast may draw from the accelerator formula and still refuse a run.
UNCERTAIN_SHARE = 0.15
_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def host_memory_forecast(
    cfg: TrainConfig,
    model_dir: Path | None,
    plan: PlanValues,
    host: HostInfo,
    buckets: dict[str, int],
    controls: int = 0,
    control_sizes: Sequence[tuple[int, int]] = (),
    texts: int = 0,
) -> dict[str, Any]:
    """Peak host RAM of the run (module docstring). `buckets`: "WxH" -> images (the scan's
    histogram); `controls`: control images per sample; `control_sizes`: every control's (w, h)
    where controls train at sizes of their own (TrainConfig.control_resolution), else ();
    `texts`: the texts phase 1 encodes and keeps (host_memory_texts.texts_encoded). Returns {"host_gb": GB or None (a hub id:
    nothing to size), "phases": {...} (one process's, above its base) or None, "certain": whether the formula has been measured
    on this kind of host (CPU), "vae_pixels": the largest bucket's pixels}."""
    from lorastudio.jobs.preflight import WEIGHT_BYTES, denoiser_param_split, estimate_memory_gb, param_count
    from lorastudio.jobs.vram_estimate import (
        _LORA_STATE_BYTES,
        adapter_shape,
        converted_bytes,
        lora_param_count,
    )

    if model_dir is None:
        return {"host_gb": None, "phases": None, "certain": False, "vae_pixels": None}
    fam = families.get(cfg.family)
    spec = fam.spec
    sizes = [tuple(int(v) for v in key.split("x")) for key in buckets] or [
        (top_resolution(cfg.resolution) or 1024,) * 2
    ]
    pixels = max(w * h for w, h in sizes)
    target_pixels = pixels
    variants = int(cfg.cache_variants or 1)
    cells = sum(
        (w // spec.vae_scale_factor) * (h // spec.vae_scale_factor) * n
        for (w, h), n in zip(sizes, buckets.values(), strict=False)
    )
    cache = cells * spec.latent_channels * variants * (2 + controls) * 4 / 1e9
    if control_sizes:  # controls of their own sizes: their cells, and the largest one decoded
        scale = spec.vae_scale_factor
        own = sum((w // scale) * (h // scale) for w, h in control_sizes)
        cache = (cells * 2 + own) * spec.latent_channels * variants * 4 / 1e9
        pixels = max(pixels, max(w * h for w, h in control_sizes))
    mode = latent_mode(cfg.latent_cache, int(cache * 1e9), cfg.latent_cache_max_gb)
    if mode == "per_step":
        cache, encoded_at_once = 0.0, cfg.batch_size * (1 + controls)
    else:  # memory: the set's posteriors in RAM; disk: only a batch's shards (read per step)
        cache = cache if mode == "memory" else 0.0
        encoded_at_once = variants * (1 + controls) if controls else variants
    call_pixels = pixels * max(encoded_at_once, 1)  # the largest VAE call: images x pixels
    if control_sizes:  # the targets in one call, then each control slot alone (training.inputs.latents)
        largest = max(w * h for w, h in control_sizes)
        call_pixels = (
            max(cfg.batch_size * target_pixels, largest)  # per step: one control per call
            if mode == "per_step"
            else variants * max(target_pixels, largest)  # cached: a slot's variants per call
        )
    compute = "bf16" if plan.base_precision in ("fp8", "int8", "nf4") else plan.base_precision
    act_bytes = _DTYPE_BYTES.get(compute, 4)
    vae_act = vae_act_gb(model_dir / "vae", call_pixels, act_bytes)
    # the caption embeddings, held in RAM from phase 1 to the end (a bound for a family that cuts them)
    held, exact = texts_held_gb(spec, model_dir / spec.denoiser, cfg, texts, mode, act_bytes)
    if host.device == "cuda":
        # weights and activations on the GPU: host RAM holds the process (CUDA's libraries,
        # Inductor), the cache, the swapped blocks and what a load converts on the CPU
        per = WEIGHT_BYTES[compute] / 1e9
        other, blocks = denoiser_param_split(model_dir / spec.denoiser)
        swapped = sum(sorted(blocks)[: max(plan.offload_blocks, 0)]) * per
        load_dtype = _SAFETENSORS_DTYPE.get(compute, "F32")
        vae_dtype = "F32" if spec.vae_in_fp32 else load_dtype
        encoders = sum(
            converted_bytes(model_dir / s, load_dtype)
            for s in ("text_encoder", "text_encoder_2", "text_encoder_3")
        )
        denoiser_load = converted_bytes(model_dir / spec.denoiser, load_dtype) / 1e9
        phases = {
            "conditioning": held + encoders / 1e9,
            "latents": held + cache + converted_bytes(model_dir / "vae", vae_dtype) / 1e9,
            "denoiser": held + cache + max(swapped, denoiser_load),
        }
        base = CUDA_PROCESS_GB
        rough = float("inf")  # three families measured, one torch build: a warning, not a refusal
    else:
        per = WEIGHT_BYTES[compute] / 1e9
        encoders = sum(
            param_count(model_dir / s) for s in ("text_encoder", "text_encoder_2", "text_encoder_3")
        )
        other, blocks = denoiser_param_split(model_dir / spec.denoiser)
        weights = (other + sum(blocks)) * per
        tokens = (
            max(
                (w // (spec.vae_scale_factor * spec.patch_size))
                * (h // (spec.vae_scale_factor * spec.patch_size))
                for w, h in sizes
            )
            * plan.micro_batch_size
            * (1 + controls)
        )
        act = cpu_activation_gb(tokens, _token_width(model_dir / spec.denoiser), act_bytes, plan)
        if act is None:  # a U-Net: its activations follow the latent cells (cpu_unet_activation_gb)
            cells = tokens * spec.patch_size**2  # the micro-batch's latent cells (a U-Net's patch: 1)
            act = cpu_unet_activation_gb(
                cells, _unet_first_channels(model_dir / spec.denoiser), act_bytes, plan
            )
        if act is None:  # the accelerator formula's denoiser phase less its fixed allowance
            device_gb = estimate_memory_gb(cfg, model_dir, plan)["phases"] or {}
            denoiser, resident = max(device_gb.get("denoiser", 1.0) - 1.0, 0.0), weights
        else:  # weights + LoRA (fp32 weights, grads, AdamW state) + the tokens' activations
            targets = tuple(cfg.lora_targets or spec.lora_targets)
            lora = lora_param_count(
                model_dir / spec.denoiser, targets, cfg.lora_rank or 16, *adapter_shape(cfg)
            )
            resident = weights + lora * _LORA_STATE_BYTES / 1e9
            denoiser = resident + act
        # beside the denoiser: the VAE (latents per step), the text encoders (train_text_encoder)
        kept = kept_params(model_dir, cfg, mode) * per
        latents = param_count(model_dir / "vae") * per + vae_act + cache
        if mode == "per_step":  # each step encodes its batch beside the loaded denoiser (no cache)
            latents = resident + kept + vae_act
        phases = {
            "conditioning": held + encoders * per,
            "latents": held + latents,
            "denoiser": held + denoiser + kept + cache,
        }
        if cfg.sample_prompts:  # a sample decodes one image through the VAE at full resolution
            phases["samples"] = phases["denoiser"] + vae_act_gb(model_dir / "vae", target_pixels, act_bytes)
        base = BASE_PROCESS_GB
        # activations from the accelerator formula (+-50 %) or a checkpointed plan's:
        # where they are more than UNCERTAIN_SHARE of the peak, the forecast only warns
        unmeasured = act is None or plan.gradient_checkpointing != "off"
        leads = max(phases, key=phases.get) == "denoiser"
        rough = phases["denoiser"] - cache - weights - held - kept if unmeasured and leads else 0.0
    rough += 0.0 if exact else held  # a family that cuts its texts: the term is a bound
    processes = max(int(cfg.num_gpus), 1)  # data-parallel: each rank a process with all of the above
    return {
        "host_gb": round(processes * (base + max(phases.values())), 2),
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "certain": rough <= UNCERTAIN_SHARE * (base + max(phases.values())),
        "vae_pixels": pixels,
    }


def _unet_first_channels(folder: Path) -> int | None:
    """block_out_channels[0] of the U-Net denoiser whose config.json is in `folder` (a _class_name
    holding "UNet"); None when unreadable or not a U-Net."""
    config = _vae_config(folder)  # any component's config.json
    name, channels = config.get("_class_name"), config.get("block_out_channels")
    if not (isinstance(name, str) and "UNet" in name and isinstance(channels, list) and channels):
        return None
    first = channels[0]
    return first if isinstance(first, int) and first > 0 else None


def available_host_bytes() -> int | None:
    """Memory this process may still use: /proc/meminfo's MemAvailable, lowered to the room its
    cgroups' memory limits leave (lorastudio/cgroup_limits.memory_room: every level of its
    hierarchy, page cache the kernel reclaims first not counted as used). None where neither
    can be read."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    room = memory_room()
    found += [] if room is None else [room]
    return min(found) if found else None


def check_host_memory(forecast: dict[str, Any], cfg: TrainConfig, available: int | None) -> str | None:
    """Refuse a run whose certain forecast exceeds `available` bytes: raises HostMemoryShort naming
    the forecast, the available memory and the settings that lower it. Returns a warning for an
    uncertain forecast that exceeds it, else None."""
    gb = forecast.get("host_gb")
    if gb is None or available is None or gb * 1e9 <= available:
        return None
    message = (
        f"the run is forecast to need {gb:.2f} GB of host RAM at its peak and {available / 1e9:.2f} GB is"
        f" available; lower resolution (now {cfg.resolution}), batch_size (now {cfg.batch_size}),"
        f" cache_variants (now {cfg.cache_variants}) or latent_cache_max_gb (now {cfg.latent_cache_max_gb}),"
        " or free memory"
    )
    limit = memory_limit()
    if limit is not None:  # a container: its limit is one more thing to raise
        message += (
            f" (this process's cgroup limits it to {limit / 1e9:.2f} GB: a container's memory limit,"
            " docker run --memory, a Kubernetes limit or a Slurm job's --mem, may be raised instead)"
        )
    if forecast.get("certain"):
        raise HostMemoryShort(message, forecast_gb=gb, available_gb=round(available / 1e9, 2))
    return "may not fit: " + message


def refuse_if_short(run: ValidatedRun, host: HostInfo | None = None) -> str | None:
    """The check a run passes before any model loads (job service submit, `lorastudio train`):
    the forecast of `run` on `host` (default this machine) against available_host_bytes().
    Raises HostMemoryShort (a certain forecast that does not fit); returns a warning (an
    uncertain one that does not) or None."""
    from lorastudio.jobs.hardware import host_info
    from lorastudio.jobs.preflight import plan_for_estimate

    host = host or host_info()
    cfg = run.config
    forecast = scan_forecast(cfg, run.model_dir, plan_for_estimate(cfg, host), host, run.scan)
    return check_host_memory(forecast, cfg, available_host_bytes())


def scan_forecast(
    cfg: TrainConfig, model_dir: Path | None, plan: PlanValues, host: HostInfo, scan: DatasetScan
) -> dict[str, Any]:
    """host_memory_forecast of a run over `scan`: its buckets, controls (their own sizes where
    they have them) and the texts phase 1 keeps (the preflight report and refuse_if_short)."""
    return host_memory_forecast(
        cfg, model_dir, plan, host, scan.bucket_histogram(), scan.controls_per_image(),
        [size for it in scan.items for size in it.control_sizes],
        texts_encoded(cfg, scan, families.get(cfg.family).spec),
    )  # fmt: skip
