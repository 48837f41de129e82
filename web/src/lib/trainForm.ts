/**
 * The Train screen's form model: string/boolean values as the inputs hold them, filled from the
 * config's defaults and the picked family's defaults, and turned into a TrainConfig body.
 * Pure functions, no React.
 */
import type { Family, TrainConfig } from "../api/types";

type Key = keyof TrainConfig;
export type FormValues = Partial<Record<Key, string | boolean>> & { unit: "steps" | "epochs"; length: string };

type Scheduler = NonNullable<TrainConfig["lr_scheduler"]>;
type Sampling = NonNullable<TrainConfig["timestep_sampling"]>;

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

/** The config's own defaults for the fields the form shows (lorastudio.config.TrainConfig). */
export const CONFIG_DEFAULTS: Partial<TrainConfig> = {
  steps: 1000,
  batch_size: 1,
  grad_accum: 1,
  lr_scheduler: "constant",
  lr_warmup_steps: 0,
  lora_dropout: 0,
  aspect_buckets: true,
  caption_dropout: 0,
  base_precision: "auto",
  seed: 42,
  weight_decay: 1e-4,
  max_grad_norm: 1.0,
  gradient_checkpointing: false,
  random_crop: false,
  random_flip: false,
  timestep_sampling: "logit_normal",
  logit_mean: 0,
  logit_std: 1,
};

/** Fields shown only when the family lists them in `supports`. */
export const FAMILY_FIELDS = [
  "snr_gamma",
  "timestep_sampling",
  "logit_mean",
  "logit_std",
  "flow_shift",
  "guidance",
  "max_sequence_length",
] as const satisfies readonly Key[];

const NUMBER_FIELDS: readonly Key[] = [
  "resolution",
  "batch_size",
  "grad_accum",
  "learning_rate",
  "lr_warmup_steps",
  "lora_rank",
  "lora_alpha",
  "lora_dropout",
  "caption_dropout",
  "seed",
  "weight_decay",
  "max_grad_norm",
  "snr_gamma",
  "logit_mean",
  "logit_std",
  "flow_shift",
  "guidance",
  "max_sequence_length",
  "sample_every",
  "sample_steps",
];
const INTEGER_FIELDS = new Set<Key>([
  "resolution",
  "batch_size",
  "grad_accum",
  "lr_warmup_steps",
  "lora_rank",
  "seed",
  "max_sequence_length",
  "sample_every",
  "sample_steps",
]);
const TEXT_FIELDS: readonly Key[] = [
  "family",
  "base_model",
  "data_dir",
  "output_name",
  "lr_scheduler",
  "trigger_word",
  "base_precision",
  "default_caption",
  "timestep_sampling",
];
const BOOL_FIELDS: readonly Key[] = ["aspect_buckets", "gradient_checkpointing", "random_crop", "random_flip"];

function show(v: unknown): string | boolean | undefined {
  if (v == null) return undefined;
  if (typeof v === "boolean") return v;
  return String(v);
}

/** The sample prompts of the form's textarea: one per non-blank line, trimmed. */
export function promptLines(text: string | boolean | undefined): string[] {
  return typeof text === "string" ? text.split("\n").map((l) => l.trim()).filter((l) => l !== "") : [];
}

/** Form values for `family`, keeping the user's base model, dataset and output name. */
export function initialValues(family: Family, keep?: Partial<FormValues>): FormValues {
  const merged: Partial<TrainConfig> = { ...CONFIG_DEFAULTS, ...(family.defaults as Partial<TrainConfig>) };
  const values: FormValues = { unit: "steps", length: String(merged.steps ?? 1000) };
  for (const [k, v] of Object.entries(merged)) {
    if (k === "steps" || k === "num_epochs") continue;
    const s = show(v);
    if (s !== undefined) values[k as Key] = s;
  }
  values.family = family.name;
  for (const k of ["base_model", "data_dir", "output_name", "trigger_word"] as const) {
    if (keep?.[k] !== undefined) values[k] = keep[k];
  }
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
 * fills family defaults), family-specific fields sent only when the family supports them.
 */
export function buildConfig(values: FormValues, family: Family | undefined): BuiltConfig {
  const config: Record<string, unknown> = {};
  const problems: Record<string, string> = {};
  const supported = new Set(family?.supports ?? []);
  const skip = (k: Key) => (FAMILY_FIELDS as readonly Key[]).includes(k) && !supported.has(k);

  for (const k of TEXT_FIELDS) {
    const v = values[k];
    if (skip(k) || typeof v !== "string" || v.trim() === "") continue;
    config[k] = k === "trigger_word" || k === "default_caption" ? v : v.trim();
  }
  for (const k of NUMBER_FIELDS) {
    const v = values[k];
    if (skip(k) || typeof v !== "string" || v.trim() === "") continue;
    const n = Number(v);
    if (!Number.isFinite(n)) problems[k] = "must be a number";
    else if (INTEGER_FIELDS.has(k) && !Number.isInteger(n)) problems[k] = "must be a whole number";
    else config[k] = n;
  }
  const prompts = promptLines(values.sample_prompts);
  if (prompts.length) config.sample_prompts = prompts;
  for (const k of BOOL_FIELDS) {
    const v = values[k];
    if (typeof v === "boolean") config[k] = v;
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
