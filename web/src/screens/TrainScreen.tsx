import { useEffect, useMemo, useRef, useState } from "react";
import { ApiError, unheeded } from "../api/client";
import { api } from "../api/endpoints";
import { useInfo } from "../api/info";
import { useModelChoices } from "../api/models";
import { useTraining } from "../api/training";
import type { ConfigImport, Family, PreflightReport, TrainConfig } from "../api/types";
import { AdvancedSettings } from "../components/AdvancedSettings";
import { BaseModelPicker } from "../components/BaseModelPicker";
import { DatasetEntries } from "../components/DatasetEntries";
import { defaultBaseModel, defaultFamily } from "../lib/baseModels";
import { FamilyPicker } from "../components/FamilyPicker";
import { ImportConfig, ImportReport } from "../components/ImportConfig";
import { Field } from "../components/Field";
import { DatasetSelect } from "../components/DatasetSelect";
import { checkAnnouncement, PreflightPanel } from "../components/PreflightPanel";
import { LiveStatus } from "../components/LiveStatus";
import { ProblemSummary } from "../components/ProblemSummary";
import { trainControls } from "../components/TrainControls";
import { useCloneValues } from "../lib/clone";
import { placeProblems } from "../lib/problems";
import { isAbort, useLatest, useUnmountSignal } from "../lib/latest";
import { href, navigate } from "../lib/route";
import { ErrorBanner } from "../components/ErrorBanner";
import { clearDraft, loadDraft, useDraft } from "../lib/draft";
import { restoreDraft, TRAIN_DRAFT } from "../lib/trainDraft";
import { keepForecast } from "../lib/runForecast";
import {
  ATTENTION_BACKENDS,
  FUSE_PROJECTIONS,
  attentionAvailable,
  attentionHint,
  budgetHint,
  buildConfig,
  CHECKPOINTING,
  COMPILE_MODES,
  compileAvailable,
  CONTROL_SETTINGS,
  takesControls,
  FIELD_KINDS,
  type FormValues,
  gpuInput,
  hostForGpus,
  inapplicableFields,
  initialValues,
  LORA_FORMATS,
  precisionChoices,
  SAVE_DTYPES,
  SCHEDULERS,
  valuesFromConfig,
  withSetting,
} from "../lib/trainForm";

type Errors = Record<string, string>;

/** Train: family, base model, dataset, settings; Check shows the preflight report; Start queues the run. */
export function TrainScreen({ dataset, cloneOf }: { dataset?: string; cloneOf?: string }) {
  const { info } = useInfo();
  const models = useModelChoices();
  const { refresh } = useTraining();
  const [values, setValues] = useState<FormValues | null>(null);
  const clone = useCloneValues(cloneOf, info?.families);
  const [errors, setErrors] = useState<Errors>({});
  const [general, setGeneral] = useState<string[]>([]);
  const [report, setReport] = useState<PreflightReport | null>(null);
  const [busy, setBusy] = useState<"check" | "start" | null>(null);
  // the last config imported from another trainer (its report shown above the form)
  const [imported, setImported] = useState<{ result: ConfigImport; name: string } | null>(null);
  // the Check in flight: an edit drops it (its report would be of settings no longer in the form)
  const checks = useLatest();
  const mounted = useUnmountSignal();
  // a Check or Start in flight: a second submit (Enter twice, Enter and a click) sends nothing
  const submitting = useRef(false);
  // the form: its problems beside fields out of sight are listed by its buttons (ProblemSummary)
  const form = useRef<HTMLFormElement | null>(null);

  const family: Family | undefined = info?.families.find((f) => f.name === values?.family);
  useEffect(() => {
    if (clone.values && !values) setValues(clone.values);
  }, [clone.values, values]);
  useEffect(() => {
    if (!info || !models || values || !info.families.length || cloneOf) return;
    // what the user typed here before (another screen, Back, a reload): the form as they left it
    const draft = restoreDraft(loadDraft<FormValues>(TRAIN_DRAFT), info.families);
    if (draft) {
      // what the draft left at "none" follows what is there now (a model fetched, a dataset made since)
      if (!draft.base_model) draft.base_model = defaultBaseModel(models, draft.family as string);
      if (dataset) {
        // "Train on it" from a dataset's page wins over a kept several-folders list (which would
        // hide the one Dataset select and be sent in its place)
        draft.data_dir = dataset;
        draft.datasets = "";
      } else if (!draft.data_dir && !draft.datasets) draft.data_dir = info.datasets.find((d) => d.usable)?.name ?? "";
      setValues(draft);
      return;
    }
    const start = defaultFamily(models, info.families);
    const fam = info.families.find((f) => f.name === start) ?? info.families[0];
    const v = initialValues(fam);
    v.base_model = defaultBaseModel(models, fam.name);
    v.data_dir = dataset ?? info.datasets.find((d) => d.usable)?.name ?? "";
    setValues(v);
  }, [info, models, values, dataset, cloneOf]);
  // kept as the draft once edited (a form never touched follows the defaults of its next visit:
  // a model fetched, a dataset made meanwhile); a visit to Clone does not replace the draft
  const [edited, setEdited] = useState(false);
  useDraft(TRAIN_DRAFT, edited ? values : null);

  const precisions = useMemo(
    () => family?.precisions ?? info?.host.precisions ?? ["auto"],
    [family, info],
  );
  if (clone.error) return <section className="screen"><ErrorBanner message={clone.error} /></section>;
  if (!info || !models || !values) return <section className="screen muted">Loading…</section>;

  const set = (k: keyof FormValues, v: string | boolean) => {
    setValues(withSetting(values, k, v, family));
    setEdited(true);
    checks.cancel();
    setReport(null);
    if (errors[k as string]) setErrors({ ...errors, [k as string]: "" });
  };
  const pickFamily = (name: string) => {
    const fam = info.families.find((f) => f.name === name);
    if (!fam) return;
    setEdited(true);
    const next = initialValues(fam, values);
    // a model the user chose stays; a preselected one follows the family
    const keepModel = values.base_model && values.base_model !== defaultBaseModel(models, values.family as string);
    next.base_model = keepModel ? values.base_model : defaultBaseModel(models, name);
    setValues(next);
    checks.cancel();
    setErrors({});
    setReport(null);
  };

  /** Fill the form from an imported config: its family's form with its settings (its output
   * name kept); without image folders it could bring, the dataset chosen here stays. */
  const takeImport = (result: ConfigImport, name: string) => {
    const fam = info.families.find((f) => f.name === result.config.family);
    if (!fam) {
      setGeneral([`${name}: this server has no family ${String(result.config.family)}`]);
      return;
    }
    const next = valuesFromConfig(fam, result.config as Partial<TrainConfig>);
    next.output_name = typeof result.config.output_name === "string" ? result.config.output_name : "";
    if (!("datasets" in result.config) && !("data_dir" in result.config)) next.data_dir = values.data_dir;
    setValues(next);
    setEdited(true);
    checks.cancel();
    setErrors({});
    setGeneral([]);
    setReport(null);
    setImported({ result, name });
  };

  const hidden = inapplicableFields(values, info.config_rules);
  /** Whether the form shows an input for TrainConfig field `k` now (steps / num_epochs: Length;
   * the learning rate stays, greyed out, while Adafactor sizes its own steps). */
  const hasInput = (k: string) =>
    k === "family" ||
    k === "steps" ||
    k === "num_epochs" ||
    (k in FIELD_KINDS &&
      !family?.refuses.includes(k) &&
      (takesControls(family) || !CONTROL_SETTINGS.includes(k as keyof TrainConfig)) &&
      (k === "learning_rate" || !hidden.has(k as keyof TrainConfig)));

  /**
   * Check (preflight) or Start. With problems of the form's own (a value it cannot read), the
   * server still judges the rest (a preflight, which starts nothing, of the config without those
   * fields), so that every problem shows at once; nothing is started while any is left.
   */
  const submit = async (kind: "check" | "start") => {
    if (submitting.current) return;
    submitting.current = true;
    const built = buildConfig(values, family, info.config_rules);
    const own = built.problems;
    const blocked = Object.keys(own).length > 0;
    const checking = kind === "check" || blocked;
    const ticket = checks.begin();
    setGeneral([]);
    setBusy(kind);
    try {
      if (checking) {
        const rest = Object.fromEntries(Object.entries(built.config).filter(([k]) => !(k in own)));
        const report = await api.preflight(rest, ticket.signal);
        if (!ticket.current()) return; // the form changed meanwhile: this report is of other settings
        if (!blocked) setReport(report);
        setErrors(own);
      } else {
        const started = api.start(built.config, null); // its answer heard by this screen only (below)
        // used once started (even if this screen was left meanwhile): the run's settings are on its page (Clone repeats them)
        const time = report?.time; // the Check's forecast of these settings (an edit clears the report)
        started.then(
          (job) => {
            clearDraft(TRAIN_DRAFT);
            keepForecast(job.id, time); // the Live page's ETA until the steps measure one
          },
          () => undefined,
        );
        await unheeded(started, mounted()); // left meanwhile: the run starts, this screen hears nothing (no jump to Live)
        await refresh();
        navigate("live");
      }
    } catch (err) {
      if (isAbort(err) || (checking && !ticket.current())) return; // a Start's refusal shows even after an edit
      if (err instanceof ApiError && err.problems.length) {
        const placed = placeProblems(err.problems, hasInput);
        setErrors({ ...placed.fields, ...own });
        setGeneral(placed.general);
      } else {
        setErrors(own);
        setGeneral([err instanceof Error ? err.message : String(err)]);
      }
    } finally {
      submitting.current = false;
      setBusy(null);
    }
  };

  const refusal = general.length ? "train-form-errors" : undefined; // the buttons' last refusal, read with them (RELIABILITY 2060)
  const c = trainControls(values, errors, set);
  const { text, num } = c;
  const cuda = info.host.device === "cuda";
  const gpus = gpuInput(info.host);
  // a num_gpus run is offered what the weakest of its GPUs runs (the job service's check)
  const runHost = hostForGpus(info.host, Number(values.num_gpus) || 1);
  const offered = runHost === info.host ? precisions : precisions.filter((p) => runHost.precisions.includes(p));

  return (
    <section className="screen train">
      <div className="screen-head">
        <h1>Train a LoRA</h1>
      </div>
      <ImportConfig onImported={takeImport} />
      {imported && <ImportReport result={imported.result} name={imported.name} />}
      {clone.from && (
        <div className="banner info" data-testid="clone-note">
          Settings of run <a href={href("runs", clone.from.id)}>{clone.from.output_name}</a>; the new run gets its own output name.
        </div>
      )}
      <form
        ref={form}
        className="train-form"
        onSubmit={(e) => {
          e.preventDefault();
          void submit("start");
        }}
      >
        <div className="card">
          <h2>Model and data</h2>
          <FamilyPicker families={info.families} value={text("family")} onChange={pickFamily} error={errors.family} />
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
            {!text("datasets") && (
              <DatasetSelect datasets={info.datasets} value={text("data_dir")} error={errors.data_dir} onChange={(v) => set("data_dir", v)} />
            )}
            {c.line("output_name", "Output name", { hint: "folder and file name of the LoRA", placeholder: `${values.family}-<date>-<time>` })}
            {c.line("trigger_word", "Trigger word", { hint: "prepended to every caption", placeholder: "none" })}
            <DatasetEntries
              value={text("datasets")}
              dataDir={text("data_dir")}
              datasets={info.datasets}
              error={errors.datasets}
              onChange={(v) => set("datasets", v)}
            />
            {c.check("kohya_folders", "Kohya N_name sub-folders")}
            {c.num("prior_loss_weight", "Prior loss weight", { hint: "multiplies the loss of the folders marked reg (class images)" })}
          </div>
        </div>

        <div className="card">
          <h2>Schedule</h2>
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
            {num("learning_rate", "Learning rate", {
              disabled: hidden.has("learning_rate"),
              hint: hidden.has("learning_rate") ? "Adafactor's relative step sizes the steps" : undefined,
            })}
            {c.choice("lr_scheduler", "Scheduler", SCHEDULERS)}
            {num("lr_warmup_steps", "Warmup steps")}
            {!hidden.has("lr_cycles") && num("lr_cycles", "Cosine cycles", { hint: "2 or more: each restarts at the learning rate" })}
            {!hidden.has("lr_power") && num("lr_power", "Decay power", { placeholder: "1.0", hint: "1: a straight line to ~0" })}
          </div>
        </div>

        <div className="card">
          <h2>LoRA and data</h2>
          <div className="grid">
            {num("lora_rank", "Rank")}
            {num("lora_alpha", "Alpha", { placeholder: "= rank" })}
            {num("lora_dropout", "Dropout")}
            {num("resolution", "Resolution", { hint: family ? `multiple of ${family.resolution_multiple}; several: 512, 768, 1024` : undefined })}
            {num("caption_dropout", "Caption dropout")}
            {num("keep_tokens", "Keep first tags", { hint: "fixed when shuffling (1 keeps the trigger word first)" })}
            {num("tag_dropout", "Tag dropout", { hint: "drop each other tag with this probability" })}
            {num("caption_variants", "Caption variants", { placeholder: "8", hint: "per image, each encoded once" })}
            <div className="checks">
              {c.check("aspect_buckets", "Aspect-ratio buckets")}
              {c.check("no_upscale", "Don't upscale small images")}
              {c.check("shuffle_tags", "Shuffle caption tags")}
            </div>
          </div>
        </div>

        <div className="card">
          <h2>Memory and speed</h2>
          <div className="grid">
            {c.choice("base_precision", "Precision", precisionChoices(offered), {
              hint: `of the frozen base; ${runHost === info.host ? "this host runs" : "every GPU of the run runs"} ${offered.join(", ")}`,
            })}
            {c.choice("gradient_checkpointing", "Checkpointing", CHECKPOINTING, { hint: "recompute activations: less memory, slower" })}
            {num("memory_budget_gb", "Memory budget (GB)", { placeholder: "none", hint: budgetHint(info.host) })}
            {num("offload_blocks", "Offloaded blocks", {
              placeholder: "auto",
              hint: cuda ? "blocks waiting in CPU RAM (block swap)" : "block swap needs a CUDA GPU",
            })}
            {num("micro_batch_size", "Micro-batch", { placeholder: "auto (= batch size)", hint: "samples per pass; divides the batch size" })}
            {num("num_gpus", "GPUs", { max: gpus.max, disabled: gpus.disabled, hint: gpus.hint })}
            {c.choice("compile", "Compile", COMPILE_MODES, {
              hint: cuda
                ? "auto = on with this CUDA GPU; wide (SDXL) also compiles the U-Net's ResNets: faster, longer first step"
                : `auto = off here; On / Wide need a CUDA GPU (this host: ${info.host.name})`,
              disabled: (v) => !compileAvailable(v as keyof typeof COMPILE_MODES, runHost, family),
            })}
            {c.choice("attention_backend", "Attention", ATTENTION_BACKENDS, {
              hint: attentionHint(runHost, family),
              disabled: (v) => !attentionAvailable(v as keyof typeof ATTENTION_BACKENDS, runHost, family),
            })}
            {c.choice("fuse_projections", "Fused projections", FUSE_PROJECTIONS, {
              hint: family?.fuse_projections === false
                ? `${family.title} has no projections to fuse`
                : "q/k/v (and MLP inputs) of a block as one matmul; auto = on for bf16 on a CUDA GPU",
              disabled: (v) => v === "on" && family?.fuse_projections === false,
            })}
          </div>
        </div>

        <div className="card">
          <h2>Checkpoints and output</h2>
          <div className="grid">
            {num("save_every", "Checkpoint every", { placeholder: "on stop only", hint: "optimizer steps (resume points)" })}
            {num("keep_last", "Keep last", { hint: "checkpoints retained" })}
            {num("save_lora_every", "LoRA snapshot every", { placeholder: "with checkpoints", hint: "optimizer steps (loras/<name>-step-N)" })}
            {num("keep_loras", "Keep snapshots", { placeholder: "all", hint: "LoRA snapshots retained" })}
            {c.choice("lora_format", "LoRA file format", LORA_FORMATS, { hint: "both load in ComfyUI and diffusers; A1111/Forge: kohya" })}
            {c.choice("save_dtype", "LoRA file dtype", SAVE_DTYPES, { hint: "fp32 keeps the trained weights exactly; bf16 / fp16 halve the file" })}
            {num("seed", "Seed", { hint: "same seed + data = same run" })}
          </div>
          <AdvancedSettings controls={c} family={family} hidden={hidden} host={info.host} />
        </div>

        {general.length > 0 && (
          <div className="banner error" role="alert" id="train-form-errors" data-testid="form-errors">
            {general.map((g) => (
              <div key={g}>{g}</div>
            ))}
          </div>
        )}
        <ProblemSummary scope={form} />
        <div className="form-actions">
          <button type="button" className="secondary" disabled={busy != null} onClick={() => void submit("check")} aria-describedby={refusal}>
            {busy === "check" ? "Checking…" : "Check"}
          </button>
          <button type="submit" className="primary" disabled={busy != null} aria-describedby={refusal}>
            {busy === "start" ? "Starting…" : "Start training"}
          </button>
        </div>
        <LiveStatus text={report ? checkAnnouncement(report) : ""} testId="check-announcement" />
        {report && <PreflightPanel report={report} />}
      </form>
    </section>
  );
}
