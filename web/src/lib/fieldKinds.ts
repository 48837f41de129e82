/**
 * The Train form's field table (lib/trainForm.ts re-exports it): how the form holds and sends each
 * TrainConfig field. Which fields a family refuses, which settings each optimizer / adapter / loss
 * reads and where blank means off are the server's rules, read from /api/info (Family.refuses,
 * Info.config_rules): the form holds no copy of them.
 */
import type { TrainConfig } from "../api/types";

type Key = keyof TrainConfig;

/**
 * How the form holds and sends each TrainConfig field. A Record over every key, so a field added
 * to the config fails the type-check until the form handles it.
 * - text: trimmed; raw-text: sent as typed; number / integer: parsed (blank: left to the server);
 * - bool: a checkbox; list: comma- or space-separated names; lines: one entry per line;
 * - prompts: one sample prompt per line: a prompt, "prompt || ref, ref", or a JSON SamplePrompt object (lib/samplePrompts.ts);
 * - length: steps or num_epochs, from the Length input and its unit;
 * - numbers: comma-separated numbers (a list); mapping: "name=number" pairs, comma-separated (an object);
 * - entries: the datasets editor's rows as one JSON string (lib/datasetEntries.ts);
 * - preservation: its inputs as one JSON string (lib/preservation.ts);
 * - sides: one whole number, or several separated by commas (a list: every image at each);
 * - number-or-text: a number when it reads as one (a fraction), else the trimmed text (a folder);
 * - tristate: a select of "" (unset: the base decides) / "true" / "false", sent as null-less booleans.
 */
export type Kind =
  | "text"
  | "raw-text"
  | "number"
  | "integer"
  | "bool"
  | "tristate"
  | "list"
  | "lines"
  | "prompts"
  | "length"
  | "numbers"
  | "mapping"
  | "number-or-text"
  | "entries"
  | "preservation"
  | "sides";
export const FIELD_KINDS: Record<Key, Kind> = {
  family: "text",
  base_model: "text",
  revision: "text",
  data_dir: "text",
  datasets: "entries",
  kohya_folders: "bool",
  prior_loss_weight: "number",
  preservation: "preservation",
  control_dirs: "lines",
  control_resolution: "number-or-text",
  output_name: "text",
  resolution: "sides",
  aspect_buckets: "bool",
  no_upscale: "bool",
  random_crop: "bool",
  random_flip: "bool",
  cache_variants: "integer",
  latent_cache_max_gb: "number",
  latent_cache: "text",
  trigger_word: "raw-text",
  default_caption: "raw-text",
  caption_dropout: "number",
  shuffle_tags: "bool",
  keep_tokens: "integer",
  tag_dropout: "number",
  caption_variants: "integer",
  steps: "length",
  num_epochs: "length",
  batch_size: "integer",
  grad_accum: "integer",
  learning_rate: "number",
  lr_scheduler: "text",
  lr_warmup_steps: "integer",
  lr_cycles: "integer",
  lr_power: "number",
  weight_decay: "number",
  max_grad_norm: "number",
  seed: "integer",
  lora_rank: "integer",
  lora_alpha: "number",
  lora_dropout: "number",
  lora_targets: "list",
  init_lora: "text",
  base_precision: "text",
  gradient_checkpointing: "text",
  offload_blocks: "integer",
  micro_batch_size: "integer",
  memory_budget_gb: "number",
  enable_tf32: "bool",
  save_every: "integer",
  keep_last: "integer",
  save_lora_every: "integer",
  keep_loras: "integer",
  max_bad_steps: "integer",
  lora_format: "text",
  sample_prompts: "prompts",
  sample_every: "integer",
  sample_steps: "integer",
  sample_seed: "integer",
  report_to: "list",
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
  base_config: "text",
  v_prediction: "tristate",
  num_gpus: "integer",
  optimizer: "text",
  optimizer_betas: "numbers",
  optimizer_eps: "number",
  prodigy_d_coef: "number",
  prodigy_safeguard_warmup: "bool",
  prodigy_use_bias_correction: "bool",
  adafactor_relative_step: "bool",
  adafactor_scale_parameter: "bool",
  adafactor_warmup_init: "bool",
  ema_decay: "number",
  ema_update_every: "integer",
  ema_on_cpu: "bool",
  sample_with_ema: "bool",
  adapter: "text",
  lokr_factor: "integer",
  lokr_decompose_both: "bool",
  rank_pattern: "mapping",
  alpha_pattern: "mapping",
  validation_split: "number-or-text",
  validate_every: "integer",
  validation_seed: "integer",
  alpha_mask: "bool",
  unmasked_weight: "number",
  loss: "text",
  huber_c: "number",
  huber_schedule: "text",
  save_dtype: "text",
  train_text_encoder: "bool",
  text_encoder_lr: "number",
};
