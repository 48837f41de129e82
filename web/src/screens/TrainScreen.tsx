import { useEffect, useMemo, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import { useInfo } from "../api/info";
import { useModelChoices } from "../api/models";
import { useTraining } from "../api/training";
import type { Family, PreflightReport } from "../api/types";
import { BaseModelPicker } from "../components/BaseModelPicker";
import { defaultBaseModel, defaultFamily } from "../lib/baseModels";
import { FamilyPicker } from "../components/FamilyPicker";
import { Field } from "../components/Field";
import { PreflightPanel } from "../components/PreflightPanel";
import { navigate } from "../lib/route";
import { buildConfig, type FormValues, initialValues, SCHEDULERS, TIMESTEP_SAMPLING } from "../lib/trainForm";

type Errors = Record<string, string>;

/** Train: family, base model, dataset, settings; Check shows the preflight report; Start queues the run. */
export function TrainScreen({ dataset }: { dataset?: string }) {
  const { info } = useInfo();
  const models = useModelChoices();
  const { refresh } = useTraining();
  const [values, setValues] = useState<FormValues | null>(null);
  const [errors, setErrors] = useState<Errors>({});
  const [general, setGeneral] = useState<string[]>([]);
  const [report, setReport] = useState<PreflightReport | null>(null);
  const [busy, setBusy] = useState<"check" | "start" | null>(null);

  const family: Family | undefined = info?.families.find((f) => f.name === values?.family);
  useEffect(() => {
    if (!info || !models || values || !info.families.length) return;
    const start = defaultFamily(models, info.families);
    const fam = info.families.find((f) => f.name === start) ?? info.families[0];
    const v = initialValues(fam);
    v.base_model = defaultBaseModel(models, fam.name);
    v.data_dir = dataset ?? info.datasets[0]?.name ?? "";
    setValues(v);
  }, [info, models, values, dataset]);

  const precisions = useMemo(
    () => family?.precisions ?? info?.host.precisions ?? ["auto"],
    [family, info],
  );
  if (!info || !models || !values) return <section className="screen muted">Loading…</section>;

  const set = (k: keyof FormValues, v: string | boolean) => {
    setValues({ ...values, [k]: v });
    setReport(null);
    if (errors[k as string]) setErrors({ ...errors, [k as string]: "" });
  };
  const pickFamily = (name: string) => {
    const fam = info.families.find((f) => f.name === name);
    if (!fam) return;
    const next = initialValues(fam, values);
    // a model the user chose stays; a preselected one follows the family
    const keepModel = values.base_model && values.base_model !== defaultBaseModel(models, values.family as string);
    next.base_model = keepModel ? values.base_model : defaultBaseModel(models, name);
    setValues(next);
    setErrors({});
    setReport(null);
  };
  const supports = new Set(family?.supports ?? []);

  const submit = async (kind: "check" | "start") => {
    const built = buildConfig(values, family);
    setGeneral([]);
    if (Object.keys(built.problems).length) {
      setErrors(built.problems);
      return;
    }
    setBusy(kind);
    try {
      if (kind === "check") {
        setReport(await api.preflight(built.config));
        setErrors({});
      } else {
        await api.start(built.config);
        await refresh();
        navigate("live");
      }
    } catch (err) {
      if (err instanceof ApiError && err.problems.length) {
        const byField = err.byField();
        const known = new Set([...Object.keys(values), "steps", "num_epochs"]);
        setErrors(Object.fromEntries(Object.entries(byField).filter(([k]) => known.has(k))));
        setGeneral(err.problems.filter((p) => !known.has(p.field.replace(/^(body\.)?(config\.)?/, ""))).map((p) => (p.field ? `${p.field}: ${p.message}` : p.message)));
      } else setGeneral([err instanceof Error ? err.message : String(err)]);
    } finally {
      setBusy(null);
    }
  };

  const text = (k: keyof FormValues) => (typeof values[k] === "string" ? (values[k] as string) : "");
  const num = (k: keyof FormValues, label: string, opts: { step?: string; hint?: string; placeholder?: string } = {}) => (
    <Field label={label} error={errors[k as string]} hint={opts.hint}>
      <input
        name={k as string}
        inputMode="decimal"
        value={text(k)}
        placeholder={opts.placeholder ?? "default"}
        onChange={(e) => set(k, e.target.value)}
      />
    </Field>
  );
  const check = (k: keyof FormValues, label: string) => (
    <label className="check">
      <input type="checkbox" name={k as string} checked={values[k] === true} onChange={(e) => set(k, e.target.checked)} />
      {label}
    </label>
  );

  return (
    <section className="screen train">
      <div className="screen-head">
        <h1>Train a LoRA</h1>
      </div>
      <form
        className="train-form"
        onSubmit={(e) => {
          e.preventDefault();
          void submit("start");
        }}
      >
        <div className="card">
          <h3>Model and data</h3>
          <FamilyPicker families={info.families} value={text("family")} onChange={pickFamily} />
          {errors.family && <span className="field-error">{errors.family}</span>}
          <div className="grid">
            <BaseModelPicker
              key={text("family")}
              name="base_model"
              models={models}
              family={text("family")}
              value={text("base_model")}
              onChange={(v) => set("base_model", v)}
              error={errors.base_model}
              modelsRoot={info.models_root}
            />
            <Field label="Dataset" error={errors.data_dir}>
              <select name="data_dir" value={text("data_dir")} onChange={(e) => set("data_dir", e.target.value)}>
                {!info.datasets.some((d) => d.name === values.data_dir) && <option value={text("data_dir")}>{text("data_dir") || "— pick one —"}</option>}
                {info.datasets.map((d) => (
                  <option key={d.name} value={d.name}>
                    {d.name} ({d.images} images)
                  </option>
                ))}
              </select>
            </Field>
            <Field label="Output name" error={errors.output_name} hint="folder and file name of the LoRA">
              <input name="output_name" value={text("output_name")} placeholder={`${values.family}-<date>-<time>`} onChange={(e) => set("output_name", e.target.value)} />
            </Field>
            <Field label="Trigger word" error={errors.trigger_word} hint="prepended to every caption">
              <input name="trigger_word" value={text("trigger_word")} placeholder="none" onChange={(e) => set("trigger_word", e.target.value)} />
            </Field>
          </div>
        </div>

        <div className="card">
          <h3>Schedule</h3>
          <div className="grid">
            <Field label="Length" error={errors.steps || errors.num_epochs}>
              <div className="joined">
                <input name="length" inputMode="numeric" value={values.length} onChange={(e) => set("length", e.target.value)} />
                <select aria-label="length unit" name="unit" value={values.unit} onChange={(e) => set("unit", e.target.value)}>
                  <option value="steps">Steps</option>
                  <option value="epochs">Epochs</option>
                </select>
              </div>
            </Field>
            {num("batch_size", "Batch size")}
            {num("grad_accum", "Gradient accumulation")}
            {num("learning_rate", "Learning rate")}
            <Field label="Scheduler" error={errors.lr_scheduler}>
              <select name="lr_scheduler" value={text("lr_scheduler")} onChange={(e) => set("lr_scheduler", e.target.value)}>
                {Object.entries(SCHEDULERS).map(([k, label]) => (
                  <option key={k} value={k}>
                    {label}
                  </option>
                ))}
              </select>
            </Field>
            {num("lr_warmup_steps", "Warmup steps")}
          </div>
        </div>

        <div className="card">
          <h3>LoRA and data</h3>
          <div className="grid">
            {num("lora_rank", "Rank")}
            {num("lora_alpha", "Alpha", { placeholder: "= rank" })}
            {num("lora_dropout", "Dropout")}
            {num("resolution", "Resolution", { hint: family ? `multiple of ${family.resolution_multiple}` : undefined })}
            {num("caption_dropout", "Caption dropout")}
            <Field label="Precision" error={errors.base_precision} hint="of the frozen base model">
              <select name="base_precision" value={text("base_precision")} onChange={(e) => set("base_precision", e.target.value)}>
                {precisions.map((p) => (
                  <option key={p} value={p}>
                    {p}
                  </option>
                ))}
              </select>
            </Field>
            <div className="checks">{check("aspect_buckets", "Aspect-ratio buckets")}</div>
          </div>
          <details className="advanced">
            <summary>Advanced settings</summary>
            <div className="grid">
              {num("seed", "Seed")}
              {num("weight_decay", "Weight decay")}
              {num("max_grad_norm", "Gradient clipping", { placeholder: "off" })}
              <Field label="Default caption" error={errors.default_caption} hint="for images without one" wide>
                <input name="default_caption" value={text("default_caption")} onChange={(e) => set("default_caption", e.target.value)} />
              </Field>
              {supports.has("snr_gamma") && num("snr_gamma", "Min-SNR gamma", { placeholder: "off" })}
              {supports.has("timestep_sampling") && (
                <Field label="Timestep sampling" error={errors.timestep_sampling}>
                  <select name="timestep_sampling" value={text("timestep_sampling")} onChange={(e) => set("timestep_sampling", e.target.value)}>
                    {Object.entries(TIMESTEP_SAMPLING).map(([k, label]) => (
                      <option key={k} value={k}>
                        {label}
                      </option>
                    ))}
                  </select>
                </Field>
              )}
              {supports.has("logit_mean") && num("logit_mean", "Logit mean")}
              {supports.has("logit_std") && num("logit_std", "Logit std")}
              {supports.has("flow_shift") && num("flow_shift", "Flow shift", { placeholder: "model's" })}
              {supports.has("guidance") && num("guidance", "Guidance")}
              {supports.has("max_sequence_length") && num("max_sequence_length", "Max text tokens")}
              <Field
                label="Sample prompts"
                error={errors.sample_prompts}
                hint="one per line: previews rendered with the LoRA as it trains"
                wide
              >
                <textarea
                  name="sample_prompts"
                  rows={3}
                  value={text("sample_prompts")}
                  onChange={(e) => set("sample_prompts", e.target.value)}
                />
              </Field>
              {num("sample_every", "Sample every", { placeholder: "end only", hint: "optimizer steps" })}
              {num("sample_steps", "Sample steps", { placeholder: "model's", hint: "inference steps" })}
              <div className="checks">
                {check("gradient_checkpointing", "Gradient checkpointing")}
                {check("random_crop", "Random crop")}
                {check("random_flip", "Random flip")}
              </div>
            </div>
          </details>
        </div>

        {general.length > 0 && (
          <div className="banner error" role="alert" data-testid="form-errors">
            {general.map((g) => (
              <div key={g}>{g}</div>
            ))}
          </div>
        )}
        <div className="form-actions">
          <button type="button" className="secondary" disabled={busy != null} onClick={() => void submit("check")}>
            {busy === "check" ? "Checking…" : "Check"}
          </button>
          <button type="submit" className="primary" disabled={busy != null}>
            {busy === "start" ? "Starting…" : "Start training"}
          </button>
        </div>
        {report && <PreflightPanel report={report} />}
      </form>
    </section>
  );
}
