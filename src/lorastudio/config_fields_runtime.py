"""TrainConfig's run fields: numerics and memory, checkpoints and output files, sample previews, speed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from lorastudio.config_fields_base import StrictFields
from lorastudio.config_samples import MAX_SAMPLE_PROMPT_CHARS, MAX_SAMPLE_PROMPTS, SamplePrompt, prompt_text
from lorastudio.text_rules import visible_text

BasePrecision = Literal["auto", "fp32", "bf16", "fp16", "fp8", "int8", "nf4"]
CheckpointingMode = Literal["auto", "off", "selective", "full"]
LoraFormat = Literal["diffusers", "kohya"]
SaveDtype = Literal["fp32", "bf16", "fp16"]
CompileMode = Literal["off", "on", "auto", "wide"]
AttentionBackend = Literal["auto", "cudnn", "flash", "efficient", "math", "fa4"]
FuseProjections = Literal["auto", "on", "off"]


class RuntimeFields(StrictFields):
    """How the run executes and what it writes: precision, memory, checkpoints, LoRA files, samples, speed."""

    # numerics
    base_precision: BasePrecision = Field(
        default="auto",
        description=(
            "frozen base: auto = bf16 on a GPU of compute capability 8.0+, else fp32 (with memory_budget_gb: the fastest"
            " measured plan that fits); fp8 = fp8 matmuls on bf16 weights (Ada/Hopper GPUs);"
            " int8 / nf4 = quantised base weights with bf16 compute (QLoRA)"
        ),
    )
    gradient_checkpointing: CheckpointingMode = Field(
        default="auto",
        description=(
            "recompute activations in the backward: selective = the cheap ops only, full = every"
            " repeated block; auto = off (with memory_budget_gb: what the measured plan needs)"
        ),
    )
    offload_blocks: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description=(
            "repeated blocks kept in CPU RAM and moved to the GPU in turn (block swap);"
            " null = auto: 0 (with memory_budget_gb: what the measured plan needs)"
        ),
    )
    micro_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description=(
            "samples per forward/backward pass (batch_size must divide by it; same maths);"
            " null = batch_size (with memory_budget_gb: what the measured plan needs)"
        ),
    )
    memory_budget_gb: float | None = Field(
        default=None,
        gt=0,
        le=4096,
        description=(
            "GPU memory the run may use: the settings left at auto (precision, checkpointing, block"
            " swap, micro-batch) are chosen by measuring a few real steps; null = no budget, unless the"
            " default plan is forecast over the GPU: then the GPU's memory less 1 GiB (the preflight says so)"
        ),
    )
    enable_tf32: bool = Field(default=True, description="TF32 matmuls for the run (restored after)")

    # checkpoints, divergence and output format
    save_every: int | None = Field(
        default=None,
        ge=1,
        description="checkpoint every N optimizer steps before the last (null: only on stop-and-save); "
        "every ..._every setting above the run's steps is refused (it would fall on no step)",
    )
    keep_last: int = Field(default=2, ge=1, le=1000, description="checkpoints retained (oldest removed)")
    save_lora_every: int | None = Field(
        default=None,
        ge=1,
        description="write a LoRA snapshot (loras/<name>-step-N, the run's lora_format + sidecar) every N "
        "optimizer steps before the last; every checkpoint writes one too (null: only with checkpoints)",
    )
    keep_loras: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="LoRA snapshots retained (oldest removed; null: all); needs save_lora_every, save_every "
        "or validate_every below the run's steps (snapshots are written before the last step only)",
    )
    max_bad_steps: int = Field(
        default=5, ge=1, le=1000, description="consecutive non-finite steps before the run fails as diverged"
    )
    lora_format: LoraFormat = Field(
        default="diffusers",
        description="key layout of the LoRA file: diffusers/peft names or kohya's; unset: the family's "
        "portable layout (kohya for SDXL, FLUX.2, FLUX.2 klein and Krea 2, diffusers for the others; both "
        "load in ComfyUI and diffusers at the trained strength)",
    )
    save_dtype: SaveDtype = Field(
        default="fp32",
        description="dtype of the tensors in the LoRA files (the run's LoRA, its EMA / raw pair, snapshots): "
        "fp32 (default, the trained weights exactly) | bf16 / fp16 (half the size); checkpoints stay fp32",
    )

    # sample previews (rendered with the live LoRA; they never change the training maths)
    sample_prompts: list[str | SamplePrompt] = Field(
        default_factory=list,
        max_length=MAX_SAMPLE_PROMPTS,
        description="prompts rendered as preview images during training (one image each, at the training "
        "resolution): a prompt, or an object that also sets its own width, height, seed and guidance "
        'and, for an edit family, "controls": [reference images relative to data_dir, or to the first '
        "datasets entry's folder, or in a control_dirs folder]",
    )
    sample_every: int | None = Field(
        default=None, ge=1, description="render the samples every N optimizer steps (null: only at the end)"
    )
    sample_steps: int | None = Field(
        default=None, ge=1, le=1000, description="inference steps per sample (null: the family's default)"
    )
    sample_seed: int = Field(default=0, ge=0, le=2**32 - 1, description="noise seed of every sample")
    report_to: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list,
        max_length=2,
        description="experiment trackers (optional extras): loss, LR, grad norm, samples/s, memory and "
        "sample images to TensorBoard (<run>/tensorboard) and/or Weights & Biases",
    )

    # speed
    num_gpus: int = Field(
        default=1,
        ge=1,
        le=64,
        description="data-parallel processes (one per GPU), launched by torchrun / accelerate launch",
    )
    compile: CompileMode = Field(
        default="auto",
        description="regional torch.compile of the repeated blocks: auto = on for CUDA; wide (SDXL, CUDA) "
        "also compiles the U-Net's ResNet blocks and samplers (faster steps, longer first step)",
    )
    attention_backend: AttentionBackend = Field(
        default="auto",
        description="SDPA kernel: auto = on CUDA for the transformer families, FlashAttention-4 (extra "
        "lorastudio[fa4], Hopper/Blackwell) when a probe at the run's shapes finds it correct and faster, else "
        "cuDNN when its probe passes, else flash (Chroma, whose text mask reaches every attention call: the "
        "efficient kernel, cudnn refused); fa4 / cudnn / flash / efficient / math = that one first",
    )

    fuse_projections: FuseProjections = Field(
        default="auto",
        description="run each transformer block's projections that read one input (q/k/v, and FLUX.1's "
        "MLP input, Z-Image's SwiGLU, SDXL's cross-attention k/v) as one matmul, their LoRAs too; the LoRA "
        "file is unchanged. auto = on for a LoRA (adapter 'lora': DoRA / LoHa / LoKr run unfused) on a bf16 "
        "/ fp16 base on CUDA without checkpointing, block swap or LoRA dropout (measured 1.7-3.7 % faster on an "
        "H200); on: any bf16 / fp16 / fp32 base (not fp8 / int8 / nf4)",
    )

    @field_validator("gradient_checkpointing", mode="before")
    @classmethod
    def _checkpointing_bool(cls, v: Any) -> Any:
        """true / false (the older boolean form) mean full / off."""
        if isinstance(v, bool):
            return "full" if v else "off"
        return v

    @field_validator("sample_prompts")
    @classmethod
    def _prompts_sized(cls, v: list[str | SamplePrompt]) -> list[str | SamplePrompt]:
        for i, prompt in enumerate(prompt_text(entry) for entry in v):
            if not prompt.strip():
                raise ValueError(f"prompt {i} is empty")
            if len(prompt) > MAX_SAMPLE_PROMPT_CHARS:
                raise ValueError(f"prompt {i} is longer than {MAX_SAMPLE_PROMPT_CHARS} characters")
            visible_text(prompt, f"prompt {i}")
        return v
