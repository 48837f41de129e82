import { useEffect, useRef } from "react";
import { api } from "../api/endpoints";
import type { Family, Host } from "../api/types";
import { useLoad } from "../lib/latest";
import {
  ADAPTERS,
  HUBER_SCHEDULES,
  LATENT_CACHES,
  LOSSES,
  OPTIMIZERS,
  optimizerAvailable,
  type Optimizer,
  TIMESTEP_SAMPLING,
  V_PREDICTION,
  takesControls,
} from "../lib/trainForm";
import { PreservationFields } from "./PreservationFields";
import type { TrainControls } from "./TrainControls";

interface Props {
  controls: TrainControls;
  /** The picked family: the family-specific settings it refuses (`refuses`, the server's) are not shown. */
  family: Family | undefined;
  /** Settings of an optimizer / adapter / loss other than the chosen one (trainForm.inapplicableFields): not shown. */
  hidden: ReadonlySet<string>;
  /** The host: the optimizers it cannot run are greyed out. */
  host: Host;
}

/** The settings of the Objective group (each shown when the family honours it). */
const OBJECTIVE = ["snr_gamma", "noise_offset", "timestep_sampling", "logit_mean", "logit_std", "flow_shift", "guidance", "max_sequence_length"];

/**
 * The Train form's less common settings, collapsed by default and grouped by topic. Together
 * with the visible cards, every TrainConfig field has an input (TrainScreen.test checks it).
 * Opens by itself when the server reports a problem with one of its fields.
 */
export function AdvancedSettings({ controls: c, family, hidden, host }: Props) {
  const ref = useRef<HTMLDetailsElement | null>(null);
  // the family's trained LoRAs (Generate's list), offered by name to start a run from
  const loras = useLoad(family ? (signal) => api.loras(family.name, signal) : null, family?.name ?? null);
  const loraNames = loras.data?.loras.map((l) => l.name) ?? [];
  useEffect(() => {
    const details = ref.current;
    if (details && !details.open && details.querySelector(".has-error")) details.open = true;
  });
  const refused = new Set(family?.refuses ?? []);
  const offers = (k: string) => family != null && !refused.has(k); // a family-specific setting the family honours
  const objective = OBJECTIVE.some(offers);
  const edits = takesControls(family); // the control settings: edit families only (the server refuses them for the others)
  const shown = (k: string) => !hidden.has(k);
  const refusedOn = new Set(family?.refuses_on ?? []); // boolean settings the family refuses on (Qwen-Image-Edit's random_flip)
  const tokens = family?.max_sequence_length_max; // the most its text encoder reads
  return (
    <details className="advanced" data-testid="advanced-settings" ref={ref}>
      <summary>
        <span>Advanced settings</span>{" "}
        {/* what a user comes for is named while it is collapsed: the optimizer, adapter kind and sample prompts are in here */}
        <span className="advanced-what" data-testid="advanced-what">
          optimizer, adapter kind (DoRA, LoHa, LoKr), sample prompts, validation, EMA, loss
        </span>
      </summary>
      <div className="grid">
        <h3 className="grid-head">Data</h3>
        {c.line("default_caption", "Default caption", { hint: "for images without one", wide: true })}
        {edits &&
          c.area("control_dirs", "Control folders", {
            hint: "one folder per line, each holding every image's control (reference) of the same name",
            wide: true,
          })}
        {edits &&
          c.line("control_resolution", "Control size", {
            placeholder: "pipeline",
            hint: "pipeline = the size the edit pipeline encodes a reference at (~1 MP); target = its target's bucket; a number N = the pipeline's rule at N x N",
          })}
        <div className="checks">
          {c.check("random_crop", "Random crop")}
          {!refusedOn.has("random_flip") && c.check("random_flip", "Random flip")}
        </div>
        {c.num("cache_variants", "Cached variants", { placeholder: "auto", hint: "crop/flip variants per image" })}
        {c.choice("latent_cache", "Latent cache", LATENT_CACHES, {
          hint: "disk: memory-mapped files under the studio home, reused by later runs on the same images and model",
        })}
        {c.num("latent_cache_max_gb", "Latent cache RAM (GB)", { hint: "RAM budget; above it, disk (auto) or encode per step" })}

        <PreservationFields value={c.text("preservation")} error={c.error("preservation")} onChange={(v) => c.set("preservation", v)} />

        <h3 className="grid-head">Masked loss</h3>
        {c.num("unmasked_weight", "Unmasked weight", {
          hint: "loss weight outside each image's mask (the dataset's masks/ folder, same file names); 0 = ignored",
        })}
        <div className="checks">{c.check("alpha_mask", "Mask = alpha channel")}</div>

        <h3 className="grid-head">Validation</h3>
        {c.line("validation_split", "Validation split", {
          placeholder: "off",
          hint: "a fraction held out of training (e.g. 0.1, chosen by the seed) or a folder of validation images",
        })}
        {c.num("validate_every", "Validate every", {
          placeholder: "end only",
          hint: "optimizer steps: the held-out loss at fixed noise; best / last LoRA marked",
        })}
        {c.num("validation_seed", "Validation seed", {
          placeholder: "0",
          hint: "seed of that fixed noise, apart from the run's seed: runs of other seeds compare on a validation folder (a fraction's images follow the run's seed)",
        })}

        <h3 className="grid-head">Optimizer</h3>
        {c.choice("optimizer", "Optimizer", OPTIMIZERS, {
          hint: Object.keys(OPTIMIZERS).every((o) => optimizerAvailable(o as Optimizer, host))
            ? "8-bit ones need a CUDA GPU and bitsandbytes"
            : `8-bit ones need a CUDA GPU and bitsandbytes (this host: ${host.name}${host.device === "cuda" ? ", no bitsandbytes" : ""})`,
          disabled: (v) => !optimizerAvailable(v as Optimizer, host),
        })}
        {shown("optimizer_betas") && c.line("optimizer_betas", "Betas", { placeholder: "optimizer's", hint: "beta1, beta2" })}
        {shown("optimizer_eps") && c.num("optimizer_eps", "Epsilon", { placeholder: "1e-8" })}
        {shown("prodigy_d_coef") && c.num("prodigy_d_coef", "Prodigy d_coef", { placeholder: "1.0", hint: "multiplies the learned step size" })}
        {(shown("prodigy_safeguard_warmup") || shown("adafactor_relative_step")) && (
          <div className="checks">
            {shown("prodigy_safeguard_warmup") && c.check("prodigy_safeguard_warmup", "Safeguard warmup")}
            {shown("prodigy_use_bias_correction") && c.check("prodigy_use_bias_correction", "Bias correction")}
            {shown("adafactor_relative_step") && c.check("adafactor_relative_step", "Relative step (own LR)")}
            {shown("adafactor_scale_parameter") && c.check("adafactor_scale_parameter", "Scale by parameter RMS")}
            {shown("adafactor_warmup_init") && c.check("adafactor_warmup_init", "Warmup init")}
          </div>
        )}
        {c.num("weight_decay", "Weight decay")}
        {c.num("max_grad_norm", "Gradient clipping", { placeholder: "off" })}
        {c.num("max_bad_steps", "Bad steps to fail", { hint: "non-finite steps in a row" })}

        <h3 className="grid-head">EMA</h3>
        {c.num("ema_decay", "EMA decay", { placeholder: "off", hint: "e.g. 0.999: the saved LoRA is the average; the raw one is kept" })}
        {c.num("ema_update_every", "EMA every", { hint: "optimizer steps" })}
        <div className="checks">
          {c.check("ema_on_cpu", "EMA in CPU memory")}
          {c.check("sample_with_ema", "Samples use the EMA")}
        </div>

        <h3 className="grid-head">LoRA and base model</h3>
        {c.choice("adapter", "Adapter", ADAPTERS, { hint: "LoHa / LoKr files load in ComfyUI (LyCORIS keys); in diffusers only a FLUX.2 / klein / Z-Image LoKr" })}
        {shown("lokr_factor") && c.num("lokr_factor", "LoKr factor", { placeholder: "-1", hint: "-1: as square as possible" })}
        {shown("lokr_decompose_both") && <div className="checks">{c.check("lokr_decompose_both", "Low-rank w1 too")}</div>}
        {c.line("rank_pattern", "Rank per module", { placeholder: "none", hint: "module=rank, comma-separated (e.g. to_k=8)", wide: true })}
        {c.line("alpha_pattern", "Alpha per module", { placeholder: "none", hint: "module=alpha, comma-separated", wide: true })}
        {offers("train_text_encoder") && (
          <div className="checks">{c.check("train_text_encoder", "Train the text encoders")}</div>
        )}
        {offers("text_encoder_lr") &&
          c.num("text_encoder_lr", "Text encoder LR", { placeholder: "learning rate", hint: "with text-encoder training (captions then encode every step)" })}
        {c.line("lora_targets", "Target modules", {
          placeholder: family?.lora_targets.join(", ") || "the family's",
          hint: "module name suffixes, comma-separated (blank: the family's)",
          wide: true,
        })}
        {c.line("init_lora", "Start from LoRA", {
          suggestions: loraNames,
          placeholder: "none: a fresh adapter",
          hint: "a trained LoRA's name or a .safetensors file (its weights, rank and alpha; rank / alpha blank take the file's)",
          wide: true,
        })}
        {c.line("revision", "Hub revision", { placeholder: "default branch", hint: "branch, tag or commit (hub ids only)" })}
        {c.line("base_config", "Base config", {
          placeholder: "the original model's hub id",
          hint: "single-file base model (.safetensors): pipeline folder or hub id its configs, tokenizers and missing parts come from",
          wide: true,
        })}
        {offers("v_prediction") &&
          c.choice("v_prediction", "Prediction type", V_PREDICTION, {
            hint: "single-file SDXL checkpoints: as the file says (v_pred marker), else pick",
          })}
        {c.line("assistant_lora", "Assistant LoRA", {
          placeholder: "none",
          hint: "distilled (turbo) bases only: merged while training, not in the LoRA (.safetensors path or owner/repo/file)",
          wide: true,
        })}
        <div className="checks">{c.check("enable_tf32", "TF32 matmuls")}</div>

        <h3 className="grid-head">Loss</h3>
        {c.choice("loss", "Loss", LOSSES, { hint: "huber / smooth L1: MSE-like for small errors, L1-like for large (robust to outliers)" })}
        {shown("huber_c") && c.num("huber_c", "Huber c", { placeholder: "0.1", hint: "the threshold (with a schedule: its value at pure noise)" })}
        {shown("huber_schedule") && c.choice("huber_schedule", "Huber schedule", HUBER_SCHEDULES, { hint: "c by noise level" })}

        {objective && <h3 className="grid-head">Objective</h3>}
        {offers("snr_gamma") && c.num("snr_gamma", "Min-SNR gamma", { placeholder: "off" })}
        {offers("noise_offset") &&
          c.num("noise_offset", "Noise offset", { placeholder: "off", hint: "0.03-0.1: darker darks, brighter brights" })}
        {offers("timestep_sampling") && c.choice("timestep_sampling", "Timestep sampling", TIMESTEP_SAMPLING)}
        {offers("logit_mean") && c.num("logit_mean", "Logit mean")}
        {offers("logit_std") && c.num("logit_std", "Logit std")}
        {offers("flow_shift") && c.num("flow_shift", "Flow shift", { placeholder: "model's" })}
        {offers("guidance") && c.num("guidance", "Guidance")}
        {offers("max_sequence_length") &&
          c.num("max_sequence_length", "Max text tokens", tokens != null ? { max: tokens, hint: `at most ${tokens}` } : {})}

        <h3 className="grid-head">Sample previews</h3>
        {c.area("sample_prompts", "Sample prompts", {
          hint: 'one per line: previews rendered with the LoRA as it trains; an edit model\'s references after ||, e.g. make it blue || control/a.png; a line may be a JSON object with its own size, seed and guidance: {"prompt": "a cat", "width": 768, "seed": 3}',
          wide: true,
        })}
        {c.num("sample_every", "Sample every", { placeholder: "end only", hint: "optimizer steps" })}
        {c.num("sample_steps", "Sample steps", { placeholder: "model's", hint: "inference steps" })}
        {c.num("sample_seed", "Sample seed")}
        {c.line("report_to", "Experiment trackers", {
          placeholder: "none",
          hint: "tensorboard, wandb (optional extras on the server; the studio's charts need neither)",
        })}
      </div>
    </details>
  );
}
