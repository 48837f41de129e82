import { useEffect, useRef } from "react";
import type { Family } from "../api/types";
import { FAMILY_FIELDS, TIMESTEP_SAMPLING } from "../lib/trainForm";
import type { TrainControls } from "./TrainControls";

interface Props {
  controls: TrainControls;
  /** The picked family: its `supports` decide which objective settings are shown. */
  family: Family | undefined;
}

/**
 * The Train form's less common settings, collapsed by default and grouped by topic. Together
 * with the visible cards, every TrainConfig field has an input (TrainScreen.test checks it).
 * Opens by itself when the server reports a problem with one of its fields.
 */
export function AdvancedSettings({ controls: c, family }: Props) {
  const ref = useRef<HTMLDetailsElement | null>(null);
  useEffect(() => {
    const details = ref.current;
    if (details && !details.open && details.querySelector(".field.has-error")) details.open = true;
  });
  const supports = new Set(family?.supports ?? []);
  const objective = FAMILY_FIELDS.some((k) => supports.has(k));
  return (
    <details className="advanced" data-testid="advanced-settings" ref={ref}>
      <summary>Advanced settings</summary>
      <div className="grid">
        <h4 className="grid-head">Data</h4>
        {c.line("default_caption", "Default caption", { hint: "for images without one", wide: true })}
        <div className="checks">
          {c.check("random_crop", "Random crop")}
          {c.check("random_flip", "Random flip")}
        </div>
        {c.num("cache_variants", "Cached variants", { placeholder: "auto", hint: "crop/flip variants per image" })}
        {c.num("latent_cache_max_gb", "Latent cache (GB)", { hint: "RAM budget; above it, encode per step" })}

        <h4 className="grid-head">Optimizer</h4>
        {c.num("weight_decay", "Weight decay")}
        {c.num("max_grad_norm", "Gradient clipping", { placeholder: "off" })}
        {c.num("max_bad_steps", "Bad steps to fail", { hint: "non-finite steps in a row" })}

        <h4 className="grid-head">LoRA and base model</h4>
        {c.line("lora_targets", "Target modules", {
          placeholder: family?.lora_targets.join(", ") || "the family's",
          hint: "module name suffixes, comma-separated (blank: the family's)",
          wide: true,
        })}
        {c.line("revision", "Hub revision", { placeholder: "default branch", hint: "branch, tag or commit (hub ids only)" })}
        {c.line("assistant_lora", "Assistant LoRA", {
          placeholder: "none",
          hint: "distilled (turbo) bases only: merged while training, not in the LoRA (.safetensors path or owner/repo/file)",
          wide: true,
        })}
        <div className="checks">{c.check("enable_tf32", "TF32 matmuls")}</div>

        {objective && <h4 className="grid-head">Objective</h4>}
        {supports.has("snr_gamma") && c.num("snr_gamma", "Min-SNR gamma", { placeholder: "off" })}
        {supports.has("noise_offset") &&
          c.num("noise_offset", "Noise offset", { placeholder: "off", hint: "0.03-0.1: darker darks, brighter brights" })}
        {supports.has("timestep_sampling") && c.choice("timestep_sampling", "Timestep sampling", TIMESTEP_SAMPLING)}
        {supports.has("logit_mean") && c.num("logit_mean", "Logit mean")}
        {supports.has("logit_std") && c.num("logit_std", "Logit std")}
        {supports.has("flow_shift") && c.num("flow_shift", "Flow shift", { placeholder: "model's" })}
        {supports.has("guidance") && c.num("guidance", "Guidance")}
        {supports.has("max_sequence_length") && c.num("max_sequence_length", "Max text tokens")}

        <h4 className="grid-head">Sample previews</h4>
        {c.area("sample_prompts", "Sample prompts", {
          hint: "one per line: previews rendered with the LoRA as it trains",
          wide: true,
        })}
        {c.num("sample_every", "Sample every", { placeholder: "end only", hint: "optimizer steps" })}
        {c.num("sample_steps", "Sample steps", { placeholder: "model's", hint: "inference steps" })}
        {c.num("sample_seed", "Sample seed")}
      </div>
    </details>
  );
}
