/**
 * The Train screen's form model: string/boolean values as the inputs hold them, filled from the
 * config's defaults (generated from lorastudio.config) and the picked family's defaults, and
 * turned into a TrainConfig body. Pure functions, no React.
 */
import { CONFIG_DEFAULTS } from "../api/trainConfig.gen";
import type { ConfigRules, Family, TrainConfig } from "../api/types";
import { buildEntries, entriesValue, parseRows } from "./datasetEntries";
import { buildPreservation, parsePreservation, preservationFromConfig } from "./preservation";
import { samplePromptEntries, showSamplePrompt } from "./samplePrompts";

type Key = keyof TrainConfig;
export type FormValues = Partial<Record<Key, string | boolean>> & { unit: "steps" | "epochs"; length: string };

export * from "./trainChoices";
export * from "./hostChoices";
export * from "./formText";
export * from "./fieldKinds";
import { FIELD_KINDS, type Kind } from "./fieldKinds";
import { nameList, numberList, numberMapping, promptLines } from "./formText";

/**
 * The settings that do not apply to the form's choices (the server's rules, Info.config_rules):
 * those read only by another optimizer, adapter or loss than the chosen one (a select left unset
 * is the config's default choice), and the learning rate while Adafactor sizes its own steps.
 * Hidden and not sent (the server would refuse them).
 */
export function inapplicableFields(values: Partial<FormValues>, rules: ConfigRules): Set<Key> {
  const hidden = new Set<Key>();
  for (const [field, choices] of Object.entries(rules.choice_settings)) {
    const chosen = values[field as Key] || CONFIG_DEFAULTS[field as Key];
    const mine = new Set(typeof chosen === "string" ? (choices[chosen] ?? []) : []);
    for (const setting of Object.values(choices).flat()) if (!mine.has(setting)) hidden.add(setting as Key);
  }
  if (values.optimizer === "adafactor" && values.adafactor_relative_step === true) hidden.add("learning_rate"); // Adafactor's own
  return hidden;
}

/** The settings of control (reference) images: only an edit family takes them. */
export const CONTROL_SETTINGS: readonly Key[] = ["control_dirs", "control_resolution"];

/** Whether `family` trains on control images (an edit family: its served `control_images` allow some). */
export function takesControls(family: Family | undefined): boolean {
  return (family?.control_images?.[1] ?? 0) > 0;
}

/**
 * `values` with setting `key` changed to `value`, and what follows from it: Prodigy's learning
 * rate is a multiplier of the step size it learns (the server's default 1.0), so picking Prodigy
 * sets a learning rate left at the family's default to 1, and leaving Prodigy puts it back.
 */
export function withSetting(values: FormValues, key: keyof FormValues, value: string | boolean, family?: Family): FormValues {
  const next: FormValues = { ...values, [key]: value };
  if (key !== "optimizer" || value === values.optimizer) return next;
  const familyLr = (family?.defaults as Partial<TrainConfig> | undefined)?.learning_rate;
  const lr = typeof values.learning_rate === "string" ? values.learning_rate.trim() : "";
  if (value === "prodigy" && (lr === "" || Number(lr) === familyLr)) next.learning_rate = "1";
  else if (values.optimizer === "prodigy" && Number(lr) === 1 && familyLr != null) next.learning_rate = String(familyLr);
  return next;
}

/** Settings that do not depend on the family: kept when the user picks another family. */
const KEPT_ON_FAMILY_SWITCH: readonly Key[] = [
  "base_model",
  "base_config",
  "revision",
  "data_dir",
  "datasets",
  "kohya_folders",
  "prior_loss_weight",
  "preservation",
  "output_name",
  "trigger_word",
  "default_caption",
  "seed",
  "save_every",
  "keep_last",
  "save_lora_every",
  "keep_loras",
  "max_bad_steps",
  "lora_format",
  "save_dtype",
  "compile",
  "attention_backend",
  "fuse_projections",
  "base_precision",
  "gradient_checkpointing",
  "offload_blocks",
  "memory_budget_gb",
  "num_gpus",
  "enable_tf32",
  "optimizer",
  "adapter",
  "loss",
  "huber_c",
  "huber_schedule",
  "sample_prompts",
  "sample_every",
  "sample_seed",
  "validation_split",
  "validate_every",
  "validation_seed",
  "alpha_mask",
  "unmasked_weight",
];

function show(key: Key, v: unknown): string | boolean | undefined {
  if (v == null) return undefined;
  if (FIELD_KINDS[key] === "entries") return entriesValue(v as TrainConfig["datasets"]) || undefined;
  if (FIELD_KINDS[key] === "preservation") return preservationFromConfig(v as TrainConfig["preservation"]) || undefined;
  if (typeof v === "boolean") return v;
  if (FIELD_KINDS[key] === "prompts" && Array.isArray(v)) return v.map(showSamplePrompt).join("\n");
  if (Array.isArray(v)) return v.join(FIELD_KINDS[key] === "lines" ? "\n" : ", ");
  if (typeof v === "object") return Object.entries(v as Record<string, unknown>).map(([k, n]) => `${k}=${n}`).join(", ");
  return String(v);
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

/**
 * Form values that repeat a run: `family`'s form filled from the run's resolved `config` (every
 * setting the form has), its length in the run's unit; the output name left blank so the clone
 * gets a new one.
 */
export function valuesFromConfig(family: Family, config: Partial<Record<Key, unknown>>): FormValues {
  const values = initialValues(family);
  for (const [k, v] of Object.entries(config)) {
    const kind = FIELD_KINDS[k as Key];
    if (kind === undefined || kind === "length") continue;
    const s = show(k as Key, v);
    if (s !== undefined) values[k as Key] = s;
    else if (kind !== "bool") values[k as Key] = "";
  }
  const epochs = typeof config.num_epochs === "number" && config.num_epochs > 0; // epochs override steps
  values.unit = epochs ? "epochs" : "steps";
  values.length = String((epochs ? config.num_epochs : config.steps) ?? values.length);
  values.family = family.name;
  values.output_name = "";
  return values;
}

export interface BuiltConfig {
  config: Partial<TrainConfig>;
  /** Problems found before asking the server (field -> message). */
  problems: Record<string, string>;
}

/** What a run without one of its required settings is told to do (not a bare "required"). */
export const MISSING = {
  family: "pick a model family",
  base_model: "pick a base model, or type a hub id (owner/name) or a model folder",
  data_dir: "pick a dataset (none yet? make one on the Datasets page: images and their captions)",
  datasets: "add a dataset folder",
} as const;

/**
 * The TrainConfig body of the form: numbers parsed, blank optional fields left out (the server
 * fills family defaults) except where null means off (`rules.null_means_off`: sent as null);
 * never a setting the family refuses (`family.refuses`, `family.refuses_on`; the control settings
 * unless it is an edit family) nor one of another choice's (inapplicableFields); a
 * max_sequence_length over the family's `max_sequence_length_max` is a problem.
 */
export function buildConfig(values: FormValues, family: Family | undefined, rules: ConfigRules): BuiltConfig {
  const config: Record<string, unknown> = {};
  const problems: Record<string, string> = {};
  const refused = new Set([...(family?.refuses ?? []), ...(family?.refuses_on ?? [])]);
  const hidden = inapplicableFields(values, rules);
  const offWhenBlank = new Set(rules.null_means_off);
  const controls = takesControls(family);
  const skip = (k: Key) => refused.has(k) || hidden.has(k) || (!controls && CONTROL_SETTINGS.includes(k));

  for (const [key, kind] of Object.entries(FIELD_KINDS) as [Key, Kind][]) {
    const v = values[key];
    if (skip(key) || kind === "length") continue;
    if (kind === "bool") {
      if (typeof v === "boolean") config[key] = v;
      continue;
    }
    if (kind === "prompts") {
      const prompts = samplePromptEntries(v);
      if (typeof prompts === "string") problems[key] = prompts;
      else if (prompts.length) config[key] = prompts;
      continue;
    }
    if (kind === "tristate") {
      if (v === "true" || v === "false") config[key] = v === "true";
      continue;
    }
    if (kind === "lines" || kind === "list") {
      const items = kind === "lines" ? promptLines(v) : nameList(v);
      if (items.length) config[key] = items;
      continue;
    }
    if (kind === "entries") {
      const rows = parseRows(v);
      const built = buildEntries(rows);
      if (typeof built === "string") problems[key] = built;
      else if (built.length) config[key] = built;
      continue;
    }
    if (kind === "preservation") {
      const built = buildPreservation(parsePreservation(v));
      if (typeof built === "string") problems[key] = built;
      else if (built) config[key] = built;
      continue;
    }
    if (kind === "sides") {
      const parsed = numberList(v);
      if (typeof parsed === "string" || (parsed && !parsed.every(Number.isInteger))) problems[key] = "whole numbers separated by commas";
      else if (parsed) config[key] = parsed.length === 1 ? parsed[0] : parsed;
      continue;
    }
    if (kind === "numbers" || kind === "mapping") {
      const parsed = kind === "numbers" ? numberList(v) : numberMapping(v);
      if (typeof parsed === "string") problems[key] = parsed;
      else if (parsed !== undefined) config[key] = parsed;
      continue;
    }
    const blank = typeof v !== "string" || v.trim() === "";
    if (blank) {
      if (offWhenBlank.has(key)) config[key] = null;
      continue;
    }
    const text = v as string;
    if (kind === "number-or-text") {
      const n = Number(text.trim());
      config[key] = Number.isFinite(n) ? n : text.trim();
    } else if (kind === "text") config[key] = text.trim();
    else if (kind === "raw-text") config[key] = text;
    else {
      const n = Number(text);
      if (!Number.isFinite(n)) problems[key] = "must be a number";
      else if (kind === "integer" && !Number.isInteger(n)) problems[key] = "must be a whole number";
      else config[key] = n;
    }
  }
  const tokens = family?.max_sequence_length_max;
  if (tokens != null && typeof config.max_sequence_length === "number" && config.max_sequence_length > tokens) {
    problems.max_sequence_length = `${family?.title} reads at most ${tokens} tokens`;
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
  if (config.datasets) delete config.data_dir; // the entries name every folder (data_dir is their shorthand)
  for (const k of ["family", "base_model", config.datasets || problems.datasets ? "datasets" : "data_dir"] as const) {
    if (!config[k] && !problems[k]) problems[k] = MISSING[k];
  }
  return { config: config as Partial<TrainConfig>, problems };
}
