/**
 * The Train screen's test harness: the screen in its providers, a form input by name, a CUDA
 * host, and a fake server (info, catalogue, status and a preflight that answers like the real
 * one: the plan section from the config, 400 problems for a few known bad values).
 */
import type { Info } from "../api/types";
import { TrainScreen } from "../screens/TrainScreen";
import { CATALOGUE, type Call, INFO, mockFetch } from "./fixtures";
import { renderWithProviders } from "./render";
import { SERVER_RULES } from "./serverRules.gen";

const STATUS = { job: null, queue: [], busy: false, event_seq: 0 };

export function renderTrain(props: { cloneOf?: string; dataset?: string } = {}) {
  return renderWithProviders(<TrainScreen {...props} />);
}

/** The form control named `name`. */
export const input = (name: string) => document.querySelector(`[name="${name}"]`) as HTMLInputElement;

/** INFO on a CUDA host (an H200) with `gpuCount` GPUs. */
export const cudaInfo = (gpuCount: number): Info => ({
  ...INFO,
  host: { device: "cuda", name: "NVIDIA H200", memory_gb: 139.8, precisions: ["auto", "fp32", "bf16"], gpu_count: gpuCount, ...SERVER_RULES.hosts.cuda, run_choices: [] },
});

/** The preflight's warning about small images (the real wording), gone with no_upscale. */
export const UPSCALE_WARNING =
  "1 image(s) would be upscaled by more than 2x to fill their bucket: tiny.png (3.2x); set no_upscale = true to train them at their own size, or use larger images";

/** The preflight's host RAM warning (the real wording) of a run at 2048 px and more. */
export const HOST_WARNING =
  "the run is forecast to need 5.58 GB of host RAM at its peak and 3.00 GB is available; lower resolution (now 4096), batch_size (now 1), cache_variants (now 1) or latent_cache_max_gb (now 8.0), or free memory";

/** The preflight's 400 answers: a config whose `field` is `value` is refused with these problems. */
const REFUSALS: [string, unknown, { field: string; message: string }[]][] = [
  ["cache_variants", 3, [{ field: "cache_variants", message: "> 1 needs random_crop or random_flip" }]],
  [
    "lora_rank",
    4096,
    [
      { field: "lora_rank", message: "Input should be less than or equal to 1024" },
      { field: "data_dir", message: "dataset has no images" },
    ],
  ],
  ["micro_batch_size", 3, [{ field: "micro_batch_size", message: "batch_size (1) must be a multiple of it" }]],
  // a checkbox's problem (the real wording of config_rules.optimizer_problems)
  ["adafactor_warmup_init", true, [{ field: "adafactor_warmup_init", message: "warms up the relative step: needs adafactor_relative_step" }]],
  // the family's problem (fix 2060: read with the family radio group)
  ["sample_seed", 98, [{ field: "family", message: "no base model of this family here: fetch one on the Models page" }]],
  // nested fields, two problems of one field, and one of a field the form has no input for
  [
    "sample_seed",
    99,
    [
      { field: "sample_prompts.0.width", message: "40: must be a positive multiple of 16 for flux" },
      { field: "sample_prompts", message: "sample prompt 0: flux takes no reference images (a text-to-image family)" },
      { field: "optimizer_betas.1", message: "Field required" },
      { field: "(config)", message: "a problem of the whole config" },
    ],
  ],
];

/** The preflight's entries of a config's datasets: 4 images each, sampled by their repeats. */
function fakeEntries(datasets: unknown) {
  const list = Array.isArray(datasets)
    ? (datasets as { path: string; repeats?: number; loss_weight?: number; regularisation?: boolean }[])
    : [];
  const total = list.reduce((n, e) => n + 4 * (e.repeats ?? 1), 0);
  return list.map((e) => ({
    label: e.path, path: `/d/${e.path}`, images: 4, repeats: e.repeats ?? null, weight: null,
    samples_per_epoch: 4 * (e.repeats ?? 1), share: (4 * (e.repeats ?? 1)) / total, loss_weight: e.loss_weight ?? 1,
    caption_dropout: 0, resolution: 512, trigger_word: null, regularisation: e.regularisation ?? false,
  }));
}

/** The preflight's preservation line (the real wording: config_preservation.preservation_line). */
function fakePreservation(p: unknown): string | null {
  if (!p) return null;
  const { class_word, weight, prompts } = p as { class_word: string; weight?: number; prompts?: string[] };
  const what = prompts?.length ? `${prompts.length} prompt(s)` : `the captions with the trigger word replaced by '${class_word}'`;
  return (
    `the base model's output on ${what}, weight ${weight ?? 1}: one extra no-grad forward + one extra ` +
    "forward/backward per micro-batch (about 1.7-2x a step's compute)"
  );
}

/** The trained LoRAs /api/loras lists (the fields the Train form reads of them). */
export const TRAINED_LORAS = [
  { name: "smooth-flux", family: "flux", path: "/o/smooth-flux/smooth-flux.safetensors", bytes: 1, modified: 1, sidecar: null, weights: "raw", raw_step: null, files: [] },
  { name: "sharp-sdxl", family: "sdxl", path: "/o/sharp-sdxl/sharp-sdxl.safetensors", bytes: 1, modified: 1, sidecar: null, weights: "raw", raw_step: null, files: [] },
];

/** Install the fake server; `info()` is read on each /api/info call; `runs` answers /api/runs/<id>. Returns the call log. */
export function mockTrainServer(info: () => Info, runs: Record<string, unknown> = {}): Call[] {
  return mockFetch(({ method, url, body }) => {
    if (url === "/api/info") return { body: info() };
    const run = url.match(/^\/api\/runs\/([^/?]+)$/)?.[1];
    if (run !== undefined) return run in runs ? { body: runs[run] } : undefined;
    if (url === "/api/models") return { body: CATALOGUE };
    const lorasOf = url.match(/^\/api\/loras\?family=([^&]+)$/)?.[1];  // the family's trained LoRAs, by name
    if (lorasOf !== undefined) return { body: { root: "/o", loras: TRAINED_LORAS.filter((l) => l.family === lorasOf) } };
    if (url.startsWith("/api/train/status")) return { body: STATUS };
    if (method === "POST" && url === "/api/train/preflight") {
      const cfg = (body as { config: Record<string, unknown> }).config;
      const problems = REFUSALS.find(([field, value]) => cfg[field] === value)?.[2];
      if (problems) {
        return { status: 400, body: { error: "ConfigError", detail: "invalid configuration", problems } };
      }
      const budget = (cfg.memory_budget_gb as number | undefined) ?? null;
      const source = (name: string) => (name in cfg && cfg[name] !== "auto" ? "settings" : budget != null ? "budget" : "default");
      const defaults: Record<string, string | number> = { base_precision: "fp32", gradient_checkpointing: "off", offload_blocks: 0, micro_batch_size: 1 };
      return {
        body: {
          config: cfg,
          plan: {
            memory_budget_gb: budget,
            decided_by: budget != null ? "measured" : "settings",
            compile: cfg.compile === "wide",
            compile_shapes: cfg.compile === "wide" ? 3 : null,
            fuse_projections: cfg.fuse_projections === "on" ? true : budget != null ? null : false,
            fields: Object.entries(defaults).map(([name, d]) => ({
              name,
              requested: (cfg[name] as string | number | undefined) ?? null,
              value: source(name) === "budget" ? null : source(name) === "settings" ? cfg[name] : d,
              source: source(name),
            })),
          },
          dataset: { path: "/d", images_found: 9, images_used: 8, dropped: [{ file: "bad.png", reason: "cannot decode" }], missing_captions: [], caption_sources: {}, unique_captions: 8, buckets: { "512x512": 8 }, warnings: cfg.no_upscale ? [] : [UPSCALE_WARNING], entries: fakeEntries(cfg.datasets),
            // a paired dataset when control_resolution is set: the real wording of its lines
            mode: cfg.control_resolution != null ? { kind: "edit", note: "every sample edits with its reference images (1 per sample)" } : undefined,
            controls: cfg.control_resolution != null
              ? { pairs: 8, per_image: 1, sources: ["control/"], rule: controlRule(cfg.control_resolution), sizes: [`1024x768 -> ${controlSize(cfg.control_resolution)} (${controlRule(cfg.control_resolution)}) x 8`] }
              : null,
            masks: cfg.unmasked_weight != null ? { source: "masks/ folder", images_with_mask: 7, without_mask: ["plain.png"] } : null,
            validation: cfg.validation_split != null
              ? { held_out: 1, images: ["held.png"], source: `1 of 9 images of /d (fraction ${cfg.validation_split}, seed 42)`, train_images: 8, every: cfg.validate_every ?? null }
              : null,
          },
          schedule: { steps: 40, epochs: 5, steps_per_epoch: 8, batch_size: 1, grad_accum: 1, preservation: fakePreservation(cfg.preservation) },
          precision: { requested: "auto", base_dtype: "fp32", lora_dtype: "fp32", device: "cpu", tf32: false, gradient_checkpointing: "auto" },
          memory: {
            estimated_gb: 1.25, phases: null, note: "rough", lightest_gb: budget != null ? 0.75 : null,
            host_gb: Number(cfg.resolution ?? 1024) >= 2048 ? 5.58 : 0.79, host_phases: null, host_certain: true, available_gb: 3,
            host_warning: Number(cfg.resolution ?? 1024) >= 2048 ? HOST_WARNING : null,
          },
          family: { name: cfg.family, variant: "Tiny (step-distilled)", notes: ["train the base checkpoint instead"] },
          // jobs/target_check.py's words when its waiting bound turns the check away
          notes: cfg.lora_targets != null ? [TARGETS_NOT_CHECKED] : [],
          // jobs/preflight.conditioning_section's words
          conditioning: cfg.train_text_encoder
            ? { per_step: true, note: "train_text_encoder: both CLIP text encoders stay loaded and train with a LoRA, so captions are encoded in every step (no caption cache): more memory and time per step" }
            : { per_step: false, note: "each unique caption is encoded once before training (caption cache)" },
          latent_cache: cfg.latent_cache === "disk"
            ? { setting: "disk", mode: "disk", ram_gb: 0.5, folder: "/h/cache/encoded/latents/ab12", disk_bytes: 2.5e9, images: 8, images_cached: 6, note: "latents on disk: reuses 6 of 8 images' latents, encodes 2" }
            : { setting: (cfg.latent_cache as string | undefined) ?? "auto", mode: cfg.latent_cache === "off" ? "per_step" : "memory", ram_gb: 0.5 },
          time: {
            total_s: 754, source: "history", confidence: "measured", runs: 2,
            note: "within ~15 % when nothing else runs on the machine (basis: measured by 2 earlier runs of this base and plan on this machine)",
            phases: [
              { name: "weights_load", seconds: 18.3, basis: "measured by 2 earlier runs of this base and plan on this machine" },
              { name: "steps", seconds: 700, basis: "measured by 2 earlier runs of this base and plan on this machine" },
              { name: "other", seconds: 35.7, basis: "measured by 2 earlier runs (engine preflight, freeing memory, gaps between phases)" },
            ],
          },
        },
      };
    }
    return undefined;
  });
}

/** The preflight's note of a lora_targets check left to the run's start (jobs/target_check.py). */
export const TARGETS_NOT_CHECKED =
  "lora_targets not checked now: 3 checks already running or waiting; the run's start checks it";

/** The preflight's words for a control_resolution (jobs/preflight_pairs.py, Qwen-Image-Edit). */
function controlRule(rule: unknown): string {
  if (rule === "target") return "target bucket";
  return typeof rule === "number" ? `${rule}x${rule} area` : "pipeline ~1 MP";
}

/** The size a 1024x768 control trains at under a control_resolution (a 512x512 bucket for "target"). */
function controlSize(rule: unknown): string {
  if (rule === "target") return "512x512";
  return typeof rule === "number" ? `${Math.round(Math.sqrt((rule * rule * 4) / 3) / 32) * 32}x${Math.round(Math.sqrt((rule * rule * 3) / 4) / 32) * 32}` : "1184x896";
}
