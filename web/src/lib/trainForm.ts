/**
 * The Train screen's form model: string/boolean values as the inputs hold them, filled from the
 * config's defaults (generated from lorastudio.config) and the picked family's defaults, and
 * turned into a TrainConfig body. Pure functions, no React.
 */
import { CONFIG_DEFAULTS } from "../api/trainConfig.gen";
import type { Family, Host, TrainConfig } from "../api/types";

type Key = keyof TrainConfig;
export type FormValues = Partial<Record<Key, string | boolean>> & { unit: "steps" | "epochs"; length: string };

type Scheduler = NonNullable<TrainConfig["lr_scheduler"]>;
type Sampling = NonNullable<TrainConfig["timestep_sampling"]>;
type LoraFormat = NonNullable<TrainConfig["lora_format"]>;
type CompileMode = NonNullable<TrainConfig["compile"]>;
type AttentionBackend = NonNullable<TrainConfig["attention_backend"]>;
type FuseProjections = NonNullable<TrainConfig["fuse_projections"]>;
type Precision = NonNullable<TrainConfig["base_precision"]>;
type Checkpointing = NonNullable<TrainConfig["gradient_checkpointing"]>;

/** Every scheduler the config accepts (a Record, so the compiler checks the list is complete). */
export const SCHEDULERS: Record<Scheduler, string> = {
  constant: "Constant",
  constant_with_warmup: "Constant with warmup",
  linear: "Linear decay",
  cosine: "Cosine",
  cosine_with_restarts: "Cosine with restarts",
  polynomial: "Polynomial",
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

/** The precision choices of `host`: its `precisions`, in the config's order, with labels. */
export function precisionChoices(precisions: readonly string[]): Record<string, string> {
  const known = Object.entries(PRECISIONS).filter(([p]) => precisions.includes(p));
  const unknown = precisions.filter((p) => !(p in PRECISIONS)).map((p) => [p, p]);
  return Object.fromEntries([...known, ...unknown]);
}

/** How the GPUs input behaves on `host`: at most `gpu_count`; disabled (with why) below 2 GPUs. */
export function gpuInput(host: Host): { max: number; disabled: boolean; hint: string } {
  const count = host.gpu_count ?? 0;
  if (host.device !== "cuda" || count < 1) return { max: 1, disabled: true, hint: "data-parallel training needs CUDA GPUs; this host has none" };
  if (count === 1) return { max: 1, disabled: true, hint: "this host has 1 GPU" };
  return { max: count, disabled: false, hint: `data-parallel, up to ${count} on this host` };
}

/** The memory budget's hint: the GPU's memory, or why a budget cannot apply here. */
export function budgetHint(host: Host): string {
  if (host.device !== "cuda") return `needs a CUDA GPU (this host: ${host.name}); blank = no budget`;
  return host.memory_gb != null ? `this GPU has ${host.memory_gb} GB; blank = no budget` : "blank = no budget";
}

/**
 * Whether `mode` can run on `host` for `family` (the server refuses compile on / wide without
 * CUDA, and wide for a family without wider compile regions: only SDXL has them).
 */
export function compileAvailable(mode: CompileMode, host: Host, family?: Family): boolean {
  if (mode === "wide" && !family?.wide_compile) return false;
  return (mode !== "on" && mode !== "wide") || host.device === "cuda";
}

/**
 * Whether attention `backend` can run on `host` (the server refuses cudnn / efficient without
 * CUDA, and flash on a device with no flash kernel: neither CUDA nor the CPU).
 */
export function attentionAvailable(backend: AttentionBackend, host: Host): boolean {
  if (backend === "cudnn" || backend === "efficient") return host.device === "cuda";
  if (backend === "flash") return host.device === "cuda" || host.device === "cpu";
  return true;
}

/** The attention setting's hint: what auto does here and why some kernels are greyed out. */
export function attentionHint(host: Host): string {
  if (host.device === "cuda") return "auto = cuDNN for transformers when a probe at the run's shapes passes, else flash";
  const flash = host.device === "cpu" ? "" : ", flash a CUDA GPU or the CPU";
  return `auto = torch's default here; cuDNN and memory-efficient need a CUDA GPU${flash} (this host: ${host.name})`;
}

/**
 * How the form holds and sends each TrainConfig field. A Record over every key, so a field added
 * to the config fails the type-check until the form handles it.
 * - text: trimmed; raw-text: sent as typed; number / integer: parsed (blank: left to the server);
 * - bool: a checkbox; list: comma- or space-separated names; lines: one entry per line;
 * - length: steps or num_epochs, from the Length input and its unit.
 */
type Kind = "text" | "raw-text" | "number" | "integer" | "bool" | "list" | "lines" | "length";
export const FIELD_KINDS: Record<Key, Kind> = {
  family: "text",
  base_model: "text",
  revision: "text",
  data_dir: "text",
  output_name: "text",
  resolution: "integer",
  aspect_buckets: "bool",
  random_crop: "bool",
  random_flip: "bool",
  cache_variants: "integer",
  latent_cache_max_gb: "number",
  trigger_word: "raw-text",
  default_caption: "raw-text",
  caption_dropout: "number",
  steps: "length",
  num_epochs: "length",
  batch_size: "integer",
  grad_accum: "integer",
  learning_rate: "number",
  lr_scheduler: "text",
  lr_warmup_steps: "integer",
  weight_decay: "number",
  max_grad_norm: "number",
  seed: "integer",
  lora_rank: "integer",
  lora_alpha: "number",
  lora_dropout: "number",
  lora_targets: "list",
  base_precision: "text",
  gradient_checkpointing: "text",
  offload_blocks: "integer",
  micro_batch_size: "integer",
  memory_budget_gb: "number",
  enable_tf32: "bool",
  save_every: "integer",
  keep_last: "integer",
  max_bad_steps: "integer",
  lora_format: "text",
  sample_prompts: "lines",
  sample_every: "integer",
  sample_steps: "integer",
  sample_seed: "integer",
  compile: "text",
  attention_backend: "text",
  fuse_projections: "text",
  snr_gamma: "number",
  noise_offset: "number",
  timestep_sampling: "text",
  logit_mean: "number",
  logit_std: "number",
  flow_shift: "number",
  guidance: "number",
  max_sequence_length: "integer",
  assistant_lora: "text",
  num_gpus: "integer",
};

/** Fields shown only when the family lists them in `supports`. */
export const FAMILY_FIELDS = [
  "snr_gamma",
  "noise_offset",
  "timestep_sampling",
  "logit_mean",
  "logit_std",
  "flow_shift",
  "guidance",
  "max_sequence_length",
] as const satisfies readonly Key[];

/** Fields where null means "off": a blank input sends null (else the default would apply). */
export const OFF_WHEN_BLANK: ReadonlySet<Key> = new Set<Key>(["max_grad_norm", "snr_gamma"]);

/** Settings that do not depend on the family: kept when the user picks another family. */
const KEPT_ON_FAMILY_SWITCH: readonly Key[] = [
  "base_model",
  "revision",
  "data_dir",
  "output_name",
  "trigger_word",
  "default_caption",
  "seed",
  "save_every",
  "keep_last",
  "max_bad_steps",
  "lora_format",
  "compile",
  "attention_backend",
  "fuse_projections",
  "base_precision",
  "gradient_checkpointing",
  "offload_blocks",
  "memory_budget_gb",
  "num_gpus",
  "enable_tf32",
  "sample_prompts",
  "sample_every",
  "sample_seed",
];

function show(key: Key, v: unknown): string | boolean | undefined {
  if (v == null) return undefined;
  if (typeof v === "boolean") return v;
  if (Array.isArray(v)) return v.join(FIELD_KINDS[key] === "lines" ? "\n" : ", ");
  return String(v);
}

/** The sample prompts of the form's textarea: one per non-blank line, trimmed. */
export function promptLines(text: string | boolean | undefined): string[] {
  return typeof text === "string" ? text.split("\n").map((l) => l.trim()).filter((l) => l !== "") : [];
}

/** Module names of a list input: separated by commas or white space. */
export function nameList(text: string | boolean | undefined): string[] {
  return typeof text === "string" ? text.split(/[\s,]+/).filter((t) => t !== "") : [];
}

/** Form values for `family`, keeping the user's family-independent settings from `keep`. */
export function initialValues(family: Family, keep?: Partial<FormValues>): FormValues {
  const merged: Partial<TrainConfig> = { ...CONFIG_DEFAULTS, ...(family.defaults as Partial<TrainConfig>) };
  const values: FormValues = { unit: "steps", length: String(merged.steps ?? 1000) };
  for (const [k, v] of Object.entries(merged)) {
    if (FIELD_KINDS[k as Key] === "length" || !(k in FIELD_KINDS)) continue;
    const s = show(k as Key, v);
    if (s !== undefined) values[k as Key] = s;
  }
  values.family = family.name;
  for (const k of KEPT_ON_FAMILY_SWITCH) {
    if (keep?.[k] !== undefined) values[k] = keep[k];
  }
  if (values.compile === "wide" && !family.wide_compile) values.compile = "auto"; // wide is SDXL's only
  if (values.fuse_projections === "on" && !family.fuse_projections) values.fuse_projections = "auto";
  if (keep?.unit) {
    values.unit = keep.unit;
    values.length = keep.length ?? values.length;
  }
  return values;
}

export interface BuiltConfig {
  config: Partial<TrainConfig>;
  /** Problems found before asking the server (field -> message). */
  problems: Record<string, string>;
}

/**
 * The TrainConfig body of the form: numbers parsed, blank optional fields left out (the server
 * fills family defaults) except where blank means off (sent as null), family-specific fields
 * sent only when the family supports them.
 */
export function buildConfig(values: FormValues, family: Family | undefined): BuiltConfig {
  const config: Record<string, unknown> = {};
  const problems: Record<string, string> = {};
  const supported = new Set(family?.supports ?? []);
  const skip = (k: Key) => (FAMILY_FIELDS as readonly Key[]).includes(k) && !supported.has(k);

  for (const [key, kind] of Object.entries(FIELD_KINDS) as [Key, Kind][]) {
    const v = values[key];
    if (skip(key) || kind === "length") continue;
    if (kind === "bool") {
      if (typeof v === "boolean") config[key] = v;
      continue;
    }
    if (kind === "lines" || kind === "list") {
      const items = kind === "lines" ? promptLines(v) : nameList(v);
      if (items.length) config[key] = items;
      continue;
    }
    const blank = typeof v !== "string" || v.trim() === "";
    if (blank) {
      if (OFF_WHEN_BLANK.has(key)) config[key] = null;
      continue;
    }
    const text = v as string;
    if (kind === "text") config[key] = text.trim();
    else if (kind === "raw-text") config[key] = text;
    else {
      const n = Number(text);
      if (!Number.isFinite(n)) problems[key] = "must be a number";
      else if (kind === "integer" && !Number.isInteger(n)) problems[key] = "must be a whole number";
      else config[key] = n;
    }
  }
  const length = Number(values.length);
  const lengthKey = values.unit === "epochs" ? "num_epochs" : "steps";
  if (values.length.trim() === "" || !Number.isInteger(length) || length < 1) {
    problems[lengthKey] = "must be a whole number of at least 1";
  } else if (values.unit === "epochs") {
    config.num_epochs = length;
  } else {
    config.steps = length;
    config.num_epochs = 0;
  }
  for (const k of ["family", "base_model", "data_dir"] as const) {
    if (!config[k]) problems[k] = "required";
  }
  return { config: config as Partial<TrainConfig>, problems };
}
