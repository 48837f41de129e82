"""Where a GPU caption job runs while a training job holds GPUs: the decision, torch-free.

`place_caption` picks the GPU (an index among the GPUs visible to the server, the arbiter's
numbering) or refuses with the reason (JobActive):
- no training job: the last GPU (a training job reserves the first ones, jobs/gpu.py);
- a training job holds the GPUs 0..n-1: a GPU it did not reserve (the last one) when the host has
  more;
- every GPU reserved: the training's GPU with the highest index, only when the captioning model's
  estimated need fits into what the run leaves free there (`fits_beside`); refused when it does
  not, naming needed vs free in GiB, or when either figure is unknown, naming which.

The figures (GiB, 2**30 bytes):
- the run's: the larger of its planned peak (its memory_budget_gb, else the preflight estimate of
  jobs/vram_estimate.py computed at submit, `planned_gpu_gib`) and its measured peak so far (the
  progress events' peak_memory_gb: torch.cuda.max_memory_allocated since the run began). What the
  run holds is that peak x TRAINING_POOL_FACTOR + CUDA_CONTEXT_GIB: the caching allocator keeps
  freed blocks reserved (the allocated peak does not count them) and the process has its own CUDA
  context. Both figures are assumptions of this module, not measured here;
- the captioner's: weights x CAPTION_BYTES_PER_PARAM (the caption worker loads bf16 on a GPU,
  captioning/vlm.py) x CAPTION_ACTIVATION_FACTOR + CUDA_CONTEXT_GIB. Parameters come from the
  safetensors headers of the model on disk (its folder or hub-cache snapshot, all its weights
  there), else from the
  catalogue's row (basemodels/captioners.py) of its hub id or of the repo its fetch marker names;
  otherwise unknown.

CAPTION_ACTIVATION_FACTOR (1.2) is arithmetic on the run's own bounds, not a measurement: one
image of at most MAX_PIXELS (1 MP, captioning/run.py), batch 1, at most MAX_TOKENS_LIMIT (512)
new tokens, greedy. For the largest catalogue captioner, Qwen2.5-VL-7B (16.6 GB of bf16 weights):
its KV cache is 28 layers x 2 x 4 KV heads x 128 x 2 B = 57 KB per token, ~0.1 GB for ~1.4k
image + prompt tokens and 512 new ones; its vision tower (32 blocks of width 1280 over the ~5.3k
patches of 1 MP) keeps one block's activations at a time, ~0.1 GB in bf16; generate() computes the
logits of the last position only. That is under 0.5 GB, ~3 % of the weights; 20 % leaves room for
the allocator's rounding and fragmentation. For the small Florence-2 the fixed context term
dominates. The lead's GPU runs may replace it with a measured figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.errors import JobActive

if TYPE_CHECKING:
    from lorastudio.captioning.source import CaptionerSource
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan

GIB = 2**30
CAPTION_BYTES_PER_PARAM = 2  # bf16 on a GPU (captioning/vlm.py)
CAPTION_ACTIVATION_FACTOR = 1.2  # see the module docstring
CUDA_CONTEXT_GIB = 0.5  # a process's CUDA context and cuBLAS workspace (assumed)
TRAINING_POOL_FACTOR = 1.1  # the training's reserved pool over its allocated peak (assumed)
_WHERE_ELSE = "caption when it ends, or on the CPU (device 'cpu')"


@dataclass(frozen=True)
class TrainingMemory:
    """What the job service knows of the live training job's GPU memory, in GiB: its planned peak
    and where that comes from, its measured peak so far (None: no step reported)."""

    job_id: str
    planned_gib: float | None = None
    planned_from: str | None = None
    measured_gib: float | None = None

    def peak(self) -> tuple[float, str] | None:
        """The larger known figure and what it is; None when none is known."""
        figures = []
        if self.planned_gib is not None:
            figures.append((self.planned_gib, self.planned_from or "its planned peak"))
        if self.measured_gib is not None:
            figures.append((self.measured_gib, "its measured peak so far"))
        return max(figures) if figures else None


@dataclass(frozen=True)
class CaptionNeed:
    """The captioning model's estimated GPU memory (None: unknown) and how it was sized (or why
    it is unknown)."""

    gib: float | None
    why: str


@dataclass(frozen=True)
class Placement:
    """The GPU a caption job runs on, and whether it shares it with a training job."""

    index: int
    beside: str | None = None  # the training job sharing the GPU, when it does


def need_for_params(params: int, where: str) -> CaptionNeed:
    """The need of a captioner of `params` parameters (see the module docstring)."""
    weights = params * CAPTION_BYTES_PER_PARAM / GIB
    gib = weights * CAPTION_ACTIVATION_FACTOR + CUDA_CONTEXT_GIB
    return CaptionNeed(
        gib,
        f"{params / 1e9:.2f} B parameters ({where}): {weights:.2f} GiB of bf16 weights"
        f" x {CAPTION_ACTIVATION_FACTOR:g} + {CUDA_CONTEXT_GIB:g} GiB CUDA context",
    )


def caption_need(source: CaptionerSource) -> CaptionNeed:
    """The need of captioner `source`: its safetensors headers on disk (its folder, else its
    hub-cache snapshot), else the catalogue row of its hub id, else unknown."""
    from lorastudio.basemodels.captioners import known_captioner, weight_problems
    from lorastudio.basemodels.checkpoints import repo_of_folder
    from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id
    from lorastudio.jobs.vram_estimate import param_count

    hub_id = is_hub_id(source.source) and source.folder is None
    folder = source.folder or (cached_snapshot(source.source, source.revision) if hub_id else None)
    # a partial download (a hub-cache snapshot with some shards) would undercount: not used
    params = param_count(folder) if folder is not None and not weight_problems(folder) else 0
    if params:
        return need_for_params(params, "its safetensors headers")
    known = known_captioner(source.source if hub_id else repo_of_folder(folder) if folder else None)
    if known is not None:
        return need_for_params(known.params, f"the catalogue's {known.title}")
    return CaptionNeed(
        None,
        f"the size of {source.source} is not known until it is on disk (fetch it first: "
        f"`lorastudio models fetch {source.source}`)",
    )


def fits_beside(
    total_gib: float, index: int, training: TrainingMemory | None, need: CaptionNeed
) -> str | None:
    """Why a caption job of `need` cannot share GPU `index` (`total_gib` of memory) with the
    training run, or None when it fits."""
    job = training.job_id if training else "?"
    peak = training.peak() if training else None
    if peak is None:
        return (
            f"training job {job} holds GPU {index} and how much of its memory the run takes is not known"
            " yet (no memory_budget_gb, no preflight estimate (its base model is not a local folder) and"
            f" no step reported); {_WHERE_ELSE}, or after its first step"
        )
    if need.gib is None:
        return f"training job {job} holds GPU {index}; {need.why}; or {_WHERE_ELSE}"
    held = peak[0] * TRAINING_POOL_FACTOR + CUDA_CONTEXT_GIB
    free = total_gib - held
    if need.gib <= free:
        return None
    return (
        f"training job {job} holds GPU {index} ({total_gib:.1f} GiB): the captioning model needs about"
        f" {need.gib:.1f} GiB ({need.why}) and {max(free, 0.0):.1f} GiB is free beside the run (its peak"
        f" {peak[0]:.1f} GiB, {peak[1]}, x {TRAINING_POOL_FACTOR:g} for its allocator's pool +"
        f" {CUDA_CONTEXT_GIB:g} GiB context); {_WHERE_ELSE}"
    )


def place_caption(
    gpu_memory_gib: tuple[float, ...],
    reserved: tuple[int, ...],
    training: TrainingMemory | None,
    need: CaptionNeed,
) -> Placement:
    """The GPU of a caption job on a host with `gpu_memory_gib` (per visible GPU) while the
    training job `training` (None: none) reserved GPUs `reserved`. Raises JobActive naming why
    it cannot run now (see the module docstring)."""
    count = len(gpu_memory_gib)
    if count == 0:
        raise JobActive("this host has no GPU; caption on the CPU (device 'cpu')")
    if training is None or not reserved:
        return Placement(count - 1)
    free = [i for i in range(count) if i not in reserved]
    if free:
        return Placement(free[-1])
    index = max(reserved)
    if (why := fits_beside(gpu_memory_gib[index], index, training, need)) is not None:
        raise JobActive(why)
    return Placement(index, beside=training.job_id)


def planned_gpu_gib(
    cfg: TrainConfig, model_dir: Path | None, scan: DatasetScan | None
) -> tuple[float, str] | None:
    """A run's planned GPU peak in GiB and where it comes from: its memory_budget_gb (the plan is
    measured to fit it), else on a GPU host the preflight estimate (jobs/vram_estimate.py, the
    plan the preflight shows) of a local pipeline; None when neither is known."""
    if cfg.memory_budget_gb is not None:
        return float(cfg.memory_budget_gb), "its memory_budget_gb"
    if model_dir is None:
        return None
    from lorastudio.config_host import compile_runs
    from lorastudio.jobs.hardware import host_info
    from lorastudio.jobs.preflight import control_load, estimate_memory_gb, plan_for_estimate

    host = host_info()
    if host.device != "cuda":
        return None
    controls = control_load(scan, cfg) if scan is not None else None
    plan = plan_for_estimate(cfg, host)
    estimate = estimate_memory_gb(
        cfg, model_dir, plan, controls, compiled=compile_runs(cfg.compile, host.device, host.capability)
    )
    gb = estimate.get("estimated_gb")
    return (gb * 1e9 / GIB, "the preflight estimate") if gb else None
