import { type FormEvent, useEffect, useRef, useState } from "react";
import { useInfo } from "../api/info";
import { useModelChoices } from "../api/models";
import { useTraining } from "../api/training";
import type { GalleryImage, GenerateBody, Lora, UploadedReference } from "../api/types";
import { BaseModelPicker } from "../components/BaseModelPicker";
import { defaultBaseModel, defaultFamily } from "../lib/baseModels";
import { FamilyPicker } from "../components/FamilyPicker";
import { Field } from "../components/Field";
import { GallerySection } from "../components/Gallery";
import { GenerateButtons } from "../components/GenerateButtons";
import { GenerateResult } from "../components/GenerateResult";
import { BaseChanged, LoraChanged } from "../components/LoraChanged";
import { type LoraPick, LoraPicker } from "../components/LoraPicker";
import { TriggerWords } from "../components/TriggerWords";
import { guidanceBody, GuidanceFields } from "../components/GuidanceFields";
import { GenerateAdvanced, textTokensBody } from "../components/GenerateAdvanced";
import { ReferenceImages, referencesOf } from "../components/ReferenceImages";
import { StepGrid } from "../components/StepGrid";
import { useRunPreset } from "../lib/runPreset";
import { type SampleRef, useSamplePreset } from "../lib/sampleAgain";
import { SampleFrom } from "../components/SampleFrom";
import { ErrorBanner } from "../components/ErrorBanner";
import { useLoraList } from "../lib/loraList";
import { loadDraft, useDraft } from "../lib/draft";
import { draftText, GENERATE_DRAFT, type GenerateDraft } from "../lib/generateDraft";
import { inFlight, newFlight, progressed, sent, track } from "../lib/generationInFlight";
import { useGenerationView } from "../lib/generationView";
import { useGallery } from "../lib/gallery";
import { gridRunning, useStepGrid } from "../lib/stepGridInFlight";
import { controlResolutionOf, currentFiles, generateWithRetry, newRequestId, picksOf, reusedBaseSettings, sizeBody } from "../lib/generateRequest";
import { familyHint } from "../lib/generateRequest";
import { type ReusedControls, reusedControlSettings } from "../lib/generateRequest";

const LIVE = new Set(["queued", "preparing", "running", "stopping"]);

/**
 * Generate: base model + trained LoRAs with scales, prompt (and a negative prompt where the family takes one),
 * guidance, seed, steps, size; the server's gallery. `fromRun`: start on that run's family, base model and LoRA.
 * `fromSample` ("Generate again" of a preview): start on every setting that renders that preview (lib/sampleAgain);
 * like a Clone on Train, this fills the form without replacing the tab's draft until the user edits it.
 */
export function GenerateScreen({ fromRun, fromSample }: { fromRun?: string; fromSample?: SampleRef } = {}) {
  const { info } = useInfo();
  const fromRunState = useRunPreset(fromRun);
  const fromSampleState = useSamplePreset(fromSample);
  const models = useModelChoices();
  const { job } = useTraining();
  // what the user typed here before (another screen, Back, a reload): the form as they left it
  const [draft] = useState(() => loadDraft<GenerateDraft>(GENERATE_DRAFT));
  const [family, setFamily] = useState<string | null>(null);
  const [baseModel, setBaseModel] = useState("");
  const [baseConfig, setBaseConfig] = useState(() => draftText(draft, "baseConfig", ""));
  const [picks, setPicks] = useState<LoraPick[]>([]);
  const [refs, setRefs] = useState<UploadedReference[]>([]);
  const [prompt, setPrompt] = useState(() => draftText(draft, "prompt", "a red circle on a blue background"));
  const [seed, setSeed] = useState(() => draftText(draft, "seed", "0"));
  // steps and size: empty until the user types one (a saved draft keeps its own): the family's, as the CLI and the
  // API take them when none is named (shown as the field's placeholder, FamilyOut.generation_steps / generation_side)
  const [steps, setSteps] = useState(() => draftText(draft, "steps", ""));
  const [width, setWidth] = useState(() => draftText(draft, "width", ""));
  const [height, setHeight] = useState(() => draftText(draft, "height", ""));
  const [guidance, setGuidance] = useState(() => draftText(draft, "guidance", ""));
  const [negative, setNegative] = useState(() => draftText(draft, "negative", ""));
  const [tokens, setTokens] = useState(() => draftText(draft, "tokens", "")); // max_sequence_length
  // a reused gallery image's hub revision, prediction type and base identity (no input of their own):
  // sent while its base model is the one chosen, so the same settings render the same pixels
  const [reusedBase, setReusedBase] = useState<Pick<GalleryImage, "base_model" | "revision" | "v_prediction" | "base_identity"> | null>(null);
  // a reused image's (a preview's) control_resolution (no input of its own): sent while its references are the form's,
  // so they are sized and encoded as the run sized them, not fitted to the output size (RELIABILITY 1652)
  const [reusedControls, setReusedControls] = useState<ReusedControls | null>(null);
  // the gallery (reloaded on a generation's or a grid's end, a delete) and the single generation's view
  const galleryLoad = useRef<(select?: string) => Promise<void>>(async () => undefined);
  const view = useGenerationView((select) => galleryLoad.current(select));
  const { busy: sending, requestId, notice, errors, setErrors, general, setGeneral, changed, setChanged, staleBase, setStaleBase } = view;
  const { gallery, galleryTotal, hasMore, more, galleryError, selected, setSelected, loadGallery, remove } = useGallery(setGeneral);
  galleryLoad.current = loadGallery;
  // the LoRA-by-step grid (it outlives this screen): while it renders, nothing else is sent
  const grid = useStepGrid();
  const busy = sending || grid.running;

  useEffect(() => {
    if (!info || !models || family || fromRunState.pending || fromSampleState.pending) return;
    const again = fromSampleState.preset?.settings;
    if (again) {
      setFamily(again.family);
      setBaseModel(again.baseModel);
      setBaseConfig(again.baseConfig);
      setPicks(again.picks);
      setPrompt(again.prompt);
      setNegative(again.negative);
      setSeed(again.seed);
      setSteps(again.steps);
      setWidth(again.width);
      setHeight(again.height);
      setGuidance(again.guidance);
      setTokens(again.tokens);
      setRefs(again.refs);
      const sized = again.controlResolution;
      setReusedControls(sized != null ? { ids: again.refs.map((r) => r.id), resolution: sized } : null);
      setReusedBase({ base_model: again.baseModel, revision: again.revision, v_prediction: again.vPrediction, base_identity: null });
      return;
    }
    const preset = fromRunState.preset;
    if (preset) {
      setFamily(preset.family);
      setBaseModel(preset.base_model);
      if (preset.lora) setPicks([{ name: preset.lora, scale: 1 }]);
      return;
    }
    if (draft?.family && info.families.some((f) => f.name === draft.family)) {
      setFamily(draft.family);
      setBaseModel(draftText(draft, "baseModel", "") || defaultBaseModel(models, draft.family));
      if (Array.isArray(draft.picks)) setPicks(draft.picks);
      return;
    }
    const start = defaultFamily(models, info.families);
    if (!start) return;
    setFamily(start);
    setBaseModel(defaultBaseModel(models, start));
  }, [info, models, family, fromRunState.pending, fromRunState.preset, fromSampleState.pending, fromSampleState.preset, draft]);
  const kept: GenerateDraft | null = family
    ? { family, baseModel, baseConfig, picks, prompt, seed, steps, width, height, guidance, negative, tokens }
    : null;
  // kept once the user changed something (a form never touched follows the defaults of its next visit)
  // (a "Generate again" form too: the draft it was opened over stays until this form is edited)
  const [touched, setTouched] = useState(draft != null && fromSample == null);
  useDraft(GENERATE_DRAFT, touched ? kept : null);
  // a page at a time, searched on the server; keyed by the family (a slow answer for the family
  // picked before never lists its LoRAs under this one) and the search
  const loraList = useLoraList(family, picks);
  const loras: Lora[] = loraList.loras;
  const lorasError = loraList.error
    ? `Cannot load the ${family} LoRAs: ${loraList.error instanceof Error ? loraList.error.message : String(loraList.error)}`
    : null;
  if (!info || !models || !family) return <section className="screen muted">Loading…</section>;

  const famInfo = info.families.find((f) => f.name === family);
  /** The user changed `field`: the server's problem with its old value no longer stands. */
  const edited = (field: string) => {
    setTouched(true);
    setErrors((shown) => {
      if (!(field in shown)) return shown;
      const { [field]: _, ...rest } = shown;
      return rest;
    });
  };
  const pickFamily = (name: string) => {
    setFamily(name);
    setErrors({});
    choosePicks([]);
    setRefs([]);
    setBaseModel(defaultBaseModel(models, name));
  };
  const choosePicks = (next: LoraPick[]) => {
    setPicks(next);
    edited("loras");
    setChanged([]);
  };
  const reuse = (img: GalleryImage) => {
    if (img.family && img.family !== family) pickFamily(img.family);
    if (img.base_model) setBaseModel(img.base_model);
    setBaseConfig(img.base_config ?? "");
    if (img.prompt != null) setPrompt(img.prompt);
    if (img.seed != null) setSeed(String(img.seed));
    setSteps(img.steps != null ? String(img.steps) : ""); // null: the family's (rendered without steps), not the typed
    if (img.width != null) setWidth(String(img.width));
    if (img.height != null) setHeight(String(img.height));
    setGuidance(img.guidance != null ? String(img.guidance) : "");
    setNegative(img.negative_prompt ?? "");
    setTokens(img.max_sequence_length != null ? String(img.max_sequence_length) : "");
    choosePicks(picksOf(img));
    const reused = referencesOf(img);
    setRefs(reused);
    const sized = controlResolutionOf(img.control_resolution);
    setReusedControls(sized != null ? { ids: reused.map((r) => r.id), resolution: sized } : null);
    setReusedBase({ base_model: img.base_model, revision: img.revision, v_prediction: img.v_prediction, base_identity: img.base_identity });
    setStaleBase(null);
  };

  const singleFile = baseModel.toLowerCase().endsWith(".safetensors");
  const settings: Omit<GenerateBody, "loras"> = {
    family,
    base_model: baseModel,
    ...(singleFile && baseConfig.trim() ? { base_config: baseConfig.trim() } : {}),
    ...reusedBaseSettings(reusedBase, baseModel),
    prompt,
    seed: Number(seed),
    ...sizeBody(steps, width, height),
    ...guidanceBody(famInfo, guidance, negative),
    ...textTokensBody(famInfo, tokens),
    references: refs.map((r) => r.id),
    ...reusedControlSettings(reusedControls, refs),
  };
  const run = (
    body: GenerateBody,
    stopped: () => boolean = () => false,
    onSent?: (requestId: string) => void,
    onProgress?: Parameters<typeof generateWithRetry>[5],
  ) =>
    generateWithRetry(
      body,
      job != null && LIVE.has(job.status),
      () => setGeneral("Waiting for the finished training run to release its memory…"),
      stopped,
      onSent,
      onProgress,
    );
  // the grid of the one LoRA picked; while a grid renders (sent before this screen was last left too), that grid
  const gridPick = grid.running && grid.pick ? grid.pick : picks.length === 1 ? picks[0] : null;

  const submit = (e: FormEvent) => {
    e.preventDefault();
    void send(picks);
  };
  /** Generate with `sending` as the LoRAs (the picks, or the picks without their sha256); `currentBase`:
   * without the reused image's base identity (the base as it is now). */
  const send = async (sending: LoraPick[], currentBase = false) => {
    if (view.generating.current || inFlight() || gridRunning()) return;
    const rid = newRequestId();
    const { base_identity: identity, ...rest } = settings;
    const body: GenerateBody = { ...rest, ...(identity && !currentBase ? { base_identity: identity } : {}), loras: sending, request_id: rid };
    const flight = newFlight(rid, sending, baseModel);
    flight.result = run(body, () => flight.cancelled, (id) => sent(flight, id), (status) => progressed(flight, status));
    track(flight);
    await view.follow(flight);
  };
  const numberField = (label: string, name: string, value: string, onChange: (v: string) => void, placeholder?: string) => (
    <Field label={label} error={errors[name.replace(/^gen_/, "")]} hint={familyHint(placeholder)}>
      <input
        name={name}
        inputMode="numeric"
        value={value}
        placeholder={placeholder}
        onChange={(e) => {
          onChange(e.target.value);
          edited(name.replace(/^gen_/, ""));
        }}
      />
    </Field>
  );
  const justMade = view.seconds != null && selected?.file === gallery?.[0]?.file; // the image this page made
  return (
    <section className="screen">
      <div className="screen-head">
        <h1>Generate</h1>
      </div>
      <ErrorBanner message={fromRunState.error ?? fromSampleState.error} />
      {fromSample && fromSampleState.preset && <SampleFrom from={fromSample} preset={fromSampleState.preset} draftKept={draft != null} />}
      <div className="generate">
        <form className="card gen-form" onSubmit={submit}>
          <FamilyPicker families={info.families} value={family} onChange={pickFamily} />
          <BaseModelPicker
            key={`base:${family}`}
            name="gen_base_model"
            models={models}
            family={family}
            value={baseModel}
            onChange={(v) => {
              setBaseModel(v);
              edited("base_model");
            }}
            error={errors.base_model}
            modelsRoot={info.models_root}
          />
          {singleFile && (
            <Field
              label="Base config"
              error={errors.base_config}
              hint="single-file checkpoint: pipeline folder or hub id of its configs (blank: the original model's)"
              wide
            >
              <input
                name="gen_base_config"
                value={baseConfig}
                onChange={(e) => {
                  setBaseConfig(e.target.value);
                  edited("base_config");
                }}
              />
            </Field>
          )}
          <LoraPicker
            loras={loras}
            loaded={loraList.loaded}
            pages={loraList}
            picks={picks}
            onChange={choosePicks}
            family={family}
            error={errors.loras}
            unavailable={lorasError}
          />
          <ReferenceImages
            key={`refs:${family}`}
            max={info.families.find((f) => f.name === family)?.control_images?.[1] ?? 0}
            value={refs}
            onChange={(next) => {
              setRefs(next);
              edited("references");
            }}
            error={errors.references}
          />
          <Field label="Prompt" error={errors.prompt} hint="Ctrl+Enter generates" wide>
            <textarea
              name="prompt"
              rows={3}
              value={prompt}
              onChange={(e) => {
                setPrompt(e.target.value);
                edited("prompt");
              }}
              onKeyDown={(e) => {
                if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !busy) {
                  e.preventDefault();
                  e.currentTarget.form?.requestSubmit();
                }
              }}
            />
          </Field>
          {/* a picked LoRA's trigger word the prompt lacks, added first as the run put it before each caption */}
          <TriggerWords loras={loras} picks={picks} prompt={prompt} onAdd={(w) => (setPrompt((p) => (p.trim() ? `${w}, ${p}` : w)), edited("prompt"))} />
          {famInfo && (
            <GuidanceFields
              family={famInfo}
              guidance={guidance}
              negative={negative}
              onGuidance={(v) => {
                setGuidance(v);
                edited("guidance");
              }}
              onNegative={(v) => {
                setNegative(v);
                edited("negative_prompt");
              }}
              errors={errors}
            />
          )}
          <div className="grid quad">
            {numberField("Seed", "gen_seed", seed, setSeed)}
            {numberField("Steps", "gen_steps", steps, setSteps, famInfo?.generation_steps != null ? String(famInfo.generation_steps) : "family's")}
            {numberField("Width", "gen_width", width, setWidth, famInfo ? String(famInfo.generation_side) : undefined)}
            {numberField("Height", "gen_height", height, setHeight, famInfo ? String(famInfo.generation_side) : undefined)}
          </div>
          {famInfo && (
            <GenerateAdvanced
              family={famInfo}
              tokens={tokens}
              onTokens={(v) => {
                setTokens(v);
                edited("max_sequence_length");
              }}
              errors={errors}
            />
          )}
          <ErrorBanner message={general} id="generate-refusal" />
          <LoraChanged
            changed={changed}
            busy={busy}
            onUseCurrent={() => {
              const now = currentFiles(picks);
              choosePicks(now);
              void send(now);
            }}
          />
          <BaseChanged
            baseModel={staleBase}
            busy={busy}
            onUseCurrent={() => {
              setReusedBase((r) => (r ? { ...r, base_identity: null } : r));
              void send(picks, true);
            }}
          />
          {notice && <div className="banner info">{notice}</div>}
          <GenerateButtons busy={busy} cancellable={busy && !!requestId} progress={sending ? view.progress : null} onCancel={view.cancel} describedBy={general ? "generate-refusal" : undefined} />
        </form>
        <GenerateResult
          selected={selected}
          seconds={justMade ? view.seconds : null}
          warnings={justMade ? view.warnings : []}
          busy={busy}
          galleryEmpty={!gallery?.length}
          onReuse={reuse}
          deleting={remove.pending}
          onDelete={(img) => void remove.run(img)}
        />
      </div>
      {gridPick && <StepGrid pick={gridPick} body={settings} generate={run} busy={busy} />}
      <GallerySection
        images={gallery}
        total={galleryTotal}
        onMore={hasMore ? () => void more.run() : undefined}
        loadingMore={more.pending}
        error={galleryError}
        selected={selected?.file ?? null}
        onSelect={setSelected}
        onRetry={() => void loadGallery().catch(() => undefined)}
      />
    </section>
  );
}
