/** The choices of the Train form's select fields and which settings each choice reads (labels for
 * the UI; values are TrainConfig's literals). Re-exported by trainForm.ts. */
import type { TrainConfig } from "../api/types";

type Key = keyof TrainConfig;

export type Scheduler = NonNullable<TrainConfig["lr_scheduler"]>;
export type Sampling = NonNullable<TrainConfig["timestep_sampling"]>;
export type LoraFormat = NonNullable<TrainConfig["lora_format"]>;
export type CompileMode = NonNullable<TrainConfig["compile"]>;
export type AttentionBackend = NonNullable<TrainConfig["attention_backend"]>;
export type FuseProjections = NonNullable<TrainConfig["fuse_projections"]>;
export type Precision = NonNullable<TrainConfig["base_precision"]>;
export type Checkpointing = NonNullable<TrainConfig["gradient_checkpointing"]>;
export type Optimizer = NonNullable<TrainConfig["optimizer"]>;
export type LatentCache = NonNullable<TrainConfig["latent_cache"]>;
export type Adapter = NonNullable<TrainConfig["adapter"]>;
export type Loss = NonNullable<TrainConfig["loss"]>;
export type SaveDtype = NonNullable<TrainConfig["save_dtype"]>;
export type HuberSchedule = NonNullable<TrainConfig["huber_schedule"]>;

/** Every scheduler the config accepts (a Record, so the compiler checks the list is complete). */
export const SCHEDULERS: Record<Scheduler, string> = {
  constant: "Constant",
  constant_with_warmup: "Constant with warmup",
  linear: "Linear decay",
  cosine: "Cosine",
  cosine_with_restarts: "Cosine with restarts",
  polynomial: "Polynomial",
};
/** The option each scheduler reads (config_schedule.SCHEDULER_OPTIONS): the others' are hidden and not sent. */
export const SCHEDULER_OPTIONS: Record<Scheduler, readonly Key[]> = {
  constant: [],
  constant_with_warmup: [],
  linear: [],
  cosine: [],
  cosine_with_restarts: ["lr_cycles"],
  polynomial: ["lr_power"],
};
export const TIMESTEP_SAMPLING: Record<Sampling, string> = {
  logit_normal: "Logit-normal",
  uniform: "Uniform",
  sigmoid: "Sigmoid",
};
export const LORA_FORMATS: Record<LoraFormat, string> = {
  diffusers: "Diffusers / PEFT",
  kohya: "Kohya (ComfyUI, A1111)",
};
/** The dtype of the LoRA files' tensors (checkpoints stay fp32). */
export const SAVE_DTYPES: Record<SaveDtype, string> = {
  fp32: "fp32 (exact)",
  bf16: "bf16 (half size)",
  fp16: "fp16 (half size)",
};
export const COMPILE_MODES: Record<CompileMode, string> = {
  auto: "Auto",
  off: "Off",
  on: "On",
  wide: "Wide (SDXL)",
};
/** The SDPA kernels a run can ask for (the plan_chosen event reports the one it used). */
export const ATTENTION_BACKENDS: Record<AttentionBackend, string> = {
  auto: "Auto",
  cudnn: "cuDNN",
  fa4: "FlashAttention-4",
  flash: "Flash",
  efficient: "Memory-efficient",
  math: "Math (slow)",
};
/** Fusing a block's same-input projections into one matmul (the server refuses "on" for a family that declares none). */
export const FUSE_PROJECTIONS: Record<FuseProjections, string> = {
  auto: "Auto",
  on: "Fused",
  off: "Separate",
};

/** Every base precision the config knows; the form offers those the host lists in `precisions`. */
export const PRECISIONS: Record<Precision, string> = {
  auto: "Auto",
  fp32: "fp32",
  bf16: "bf16",
  fp16: "fp16",
  fp8: "fp8 (fp8 matmuls, bf16 weights)",
  int8: "int8 (quantised base)",
  nf4: "nf4 (4-bit base, QLoRA)",
};
export const CHECKPOINTING: Record<Checkpointing, string> = {
  auto: "Auto",
  off: "Off",
  selective: "Selective (cheap ops recomputed)",
  full: "Full (every block recomputed)",
};

/** The optimizers (the 8-bit ones need CUDA and bitsandbytes: the server says so when they cannot run). */
export const OPTIMIZERS: Record<Optimizer, string> = {
  adamw: "AdamW (fused)",
  adamw8bit: "AdamW 8-bit (bitsandbytes, CUDA)",
  lion8bit: "Lion 8-bit (bitsandbytes, CUDA)",
  prodigy: "Prodigy (learns its step size)",
  adafactor: "Adafactor",
};
/** The options each optimizer reads (config_rules.OPTIMIZER_OPTIONS): the form shows and sends only the chosen one's. */
export const OPTIMIZER_OPTIONS: Record<Optimizer, readonly Key[]> = {
  adamw: ["optimizer_betas", "optimizer_eps"],
  adamw8bit: ["optimizer_betas", "optimizer_eps"],
  lion8bit: ["optimizer_betas"],
  prodigy: ["optimizer_betas", "optimizer_eps", "prodigy_d_coef", "prodigy_safeguard_warmup", "prodigy_use_bias_correction"],
  adafactor: ["adafactor_relative_step", "adafactor_scale_parameter", "adafactor_warmup_init"],
};
export const ADAPTERS: Record<Adapter, string> = {
  lora: "LoRA",
  dora: "DoRA (LoRA + magnitude)",
  loha: "LoHa (Hadamard)",
  lokr: "LoKr (Kronecker)",
};
/** Where the VAE latents are cached (issue 31 part 6). */
export const LATENT_CACHES: Record<LatentCache, string> = {
  auto: "Auto (RAM when it fits, else disk)",
  memory: "RAM (else encoded every step)",
  disk: "Disk (reused by later runs)",
  off: "Off (encoded every step)",
};
/** The training losses (min-SNR, where the family has it, weights each of them). */
export const LOSSES: Record<Loss, string> = {
  mse: "MSE",
  l1: "L1",
  huber: "Huber (pseudo-Huber)",
  smooth_l1: "Smooth L1",
};
/** How huber / smooth_l1 move their threshold with the noise level. */
export const HUBER_SCHEDULES: Record<HuberSchedule, string> = {
  constant: "Constant",
  exponential: "Exponential (1 → c with noise)",
  snr: "SNR (1 → c with noise, as SimpleTuner)",
};
/** The settings each loss reads (config_methods.HUBER_OPTIONS): the others' are hidden and not sent. */
export const LOSS_OPTIONS: Record<Loss, readonly Key[]> = {
  mse: [],
  l1: [],
  huber: ["huber_c", "huber_schedule"],
  smooth_l1: ["huber_c", "huber_schedule"],
};
/** v_prediction's choices (a tristate field: "" leaves it to the checkpoint). */
export const V_PREDICTION: Record<"" | "true" | "false", string> = {
  "": "as the checkpoint says",
  true: "v-prediction",
  false: "epsilon",
};
/** Settings of one adapter only (the others' are hidden and not sent). */
export const ADAPTER_OPTIONS: Record<Adapter, readonly Key[]> = {
  lora: [],
  dora: [],
  loha: [],
  lokr: ["lokr_factor", "lokr_decompose_both"],
};
