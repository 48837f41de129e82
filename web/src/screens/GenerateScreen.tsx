import { type FormEvent, useCallback, useEffect, useRef, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import { useInfo } from "../api/info";
import { useModelChoices } from "../api/models";
import { useTraining } from "../api/training";
import type { GalleryImage, GenerateBody, Lora, UploadedReference } from "../api/types";
import { BaseModelPicker } from "../components/BaseModelPicker";
import { defaultBaseModel, defaultFamily } from "../lib/baseModels";
import { FamilyPicker } from "../components/FamilyPicker";
import { Field } from "../components/Field";
import { GallerySection } from "../components/Gallery";
import { GenerateResult } from "../components/GenerateResult";
import { BaseChanged, LoraChanged } from "../components/LoraChanged";
import { type LoraPick, LoraPicker } from "../components/LoraPicker";
import { guidanceBody, GuidanceFields } from "../components/GuidanceFields";
import { ReferenceImages, referencesOf } from "../components/ReferenceImages";
import { StepGrid } from "../components/StepGrid";
import { useRunPreset } from "../lib/runPreset";
import { ErrorBanner } from "../components/ErrorBanner";
import { placeProblems } from "../lib/problems";
import { isAbort, useAction, useLatest, useLoad } from "../lib/latest";
import { loadDraft, useDraft } from "../lib/draft";
import { draftText, GENERATE_DRAFT, type GenerateDraft } from "../lib/generateDraft";
import { type InFlight, inFlight, track } from "../lib/generationInFlight";
import { baseChanged, changedLoras, currentFiles, generateWithRetry, newRequestId, picksOf, reusedBaseSettings } from "../lib/generateRequest";

/** The GenerateBody fields the form has an input for (a problem of another goes to the banner only). */
const GENERATE_INPUTS: ReadonlySet<string> = new Set([
  "base_model", "base_config", "loras", "references", "prompt", "guidance", "negative_prompt", "seed", "steps", "width", "height",
]);

const LIVE = new Set(["queued", "preparing", "running", "stopping"]);

/**
 * Generate: base model + trained LoRAs with scales, prompt (and a negative prompt where the family takes one),
 * guidance, seed, steps, size; the server's gallery. `fromRun`: start on that run's family, base model and LoRA.
 */
export function GenerateScreen({ fromRun }: { fromRun?: string } = {}) {
  const { info } = useInfo();
  const fromRunState = useRunPreset(fromRun);
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
  const [steps, setSteps] = useState(() => draftText(draft, "steps", "20"));
  const [width, setWidth] = useState(() => draftText(draft, "width", "512"));
  const [height, setHeight] = useState(() => draftText(draft, "height", "512"));
  const [guidance, setGuidance] = useState(() => draftText(draft, "guidance", ""));
  const [negative, setNegative] = useState(() => draftText(draft, "negative", ""));
  // a reused gallery image's hub revision, prediction type and base identity (no input of their own):
  // sent while its base model is the one chosen, so the same settings render the same pixels
  const [reusedBase, setReusedBase] = useState<Pick<GalleryImage, "base_model" | "revision" | "v_prediction" | "base_identity"> | null>(null);
  const [gallery, setGallery] = useState<GalleryImage[] | null>(null);
  // why the gallery's latest load failed (its own message: a generation's outcome never hides it)
  const [galleryError, setGalleryError] = useState<string | null>(null);
  const [selected, setSelected] = useState<GalleryImage | null>(null);
  const [seconds, setSeconds] = useState<number | null>(null);
  const [busy, setBusy] = useState(false);
  // the generation in flight (its request_id, for Cancel; the flight itself outlives this screen)
  const [requestId, setRequestId] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [general, setGeneral] = useState<string | null>(null);
  // the picked LoRAs the server refused as changed since the reused image was made (their sha256)
  const [changed, setChanged] = useState<string[]>([]);
  const [staleBase, setStaleBase] = useState<string | null>(null); // the base model refused as changed (base_identity)

  useEffect(() => {
    if (!info || !models || family || fromRunState.pending) return;
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
  }, [info, models, family, fromRunState.pending, fromRunState.preset, draft]);
  const kept: GenerateDraft | null = family
    ? { family, baseModel, baseConfig, picks, prompt, seed, steps, width, height, guidance, negative }
    : null;
  // kept once the user changed something (a form never touched follows the defaults of its next visit)
  const [touched, setTouched] = useState(draft != null);
  useDraft(GENERATE_DRAFT, touched ? kept : null);
  // keyed by the family: a slow answer for the family picked before never lists its LoRAs under this one
  const lorasLoad = useLoad(family ? (signal) => api.loras(family, signal) : null, family);
  const loras: Lora[] = lorasLoad.data?.loras ?? [];
  const lorasError = lorasLoad.error
    ? `Cannot load the ${family} LoRAs: ${lorasLoad.error instanceof Error ? lorasLoad.error.message : String(lorasLoad.error)}`
    : null;
  // the gallery: reloaded after a generation, a grid, a delete; only the latest reload's answer is shown
  const galleryLoads = useLatest();
  const loadGallery = useCallback(
    async (select?: string) => {
      const ticket = galleryLoads.begin();
      let images: GalleryImage[];
      try {
        images = (await api.gallery(ticket.signal)).images;
      } catch (err) {
        if (isAbort(err)) return;
        if (ticket.current()) setGalleryError(`Cannot load the gallery: ${err instanceof Error ? err.message : String(err)}`);
        throw err;
      }
      if (!ticket.current()) return;
      setGalleryError(null);
      setGallery(images);
      // show the image just made, else keep the one shown, else the newest
      setSelected((shown) => (select ? images.find((i) => i.file === select) : shown) ?? images[0] ?? null);
    },
    [galleryLoads],
  );
  useEffect(() => {
    loadGallery().catch(() => undefined); // said by galleryError
  }, [loadGallery]);

  /** Delete `img` from the server's gallery (after asking; one request however often it is clicked); the next image is shown. */
  const remove = useAction(async (img: GalleryImage) => {
    if (!window.confirm(`Delete the image "${img.prompt ?? img.file}" and its settings from the gallery?`)) return;
    try {
      await api.deleteGalleryImage(img.file);
    } catch (err) {
      // deleted meanwhile (another tab): what was asked is done
      if (!(err instanceof ApiError && err.status === 404)) {
        setGeneral(err instanceof Error ? err.message : String(err));
        return;
      }
    }
    const at = gallery?.findIndex((i) => i.file === img.file) ?? -1;
    const next = gallery?.filter((i) => i.file !== img.file) ?? [];
    setSelected(next[Math.min(Math.max(at, 0), next.length - 1)] ?? null);
    setGallery(next);
    await loadGallery(next[Math.min(Math.max(at, 0), next.length - 1)]?.file).catch(() => undefined);
  });
  // a generation in flight: a second submit (Enter twice, Ctrl+Enter and a click) sends nothing
  const generating = useRef(false);

  /** Show `flight` until it ends: busy (Cancel) meanwhile, then its image, or what went wrong (each
   * problem next to its input). Also a generation sent before this screen was last left. */
  const follow = async (flight: InFlight) => {
    generating.current = true;
    setRequestId(flight.requestId);
    setBusy(true);
    setErrors({});
    setGeneral(null);
    setNotice(null);
    setChanged([]);
    setStaleBase(null);
    try {
      const res = await flight.result;
      setGeneral(null);
      setSeconds(res.seconds);
      await loadGallery(res.file);
    } catch (err) {
      if (flight.cancelled && err instanceof ApiError && err.status === 409) {
        setGeneral(null); // the server stopped it between denoising steps: nothing kept
        setNotice("Generation cancelled: nothing was kept.");
        return;
      }
      // each problem next to its input (a LoRA's, "loras.1.scale", under the LoRA list); the banner
      // says those no input shows (as the Train form's)
      const placed =
        err instanceof ApiError && err.problems.some((p) => p.field)
          ? placeProblems(err.problems, (f) => GENERATE_INPUTS.has(f))
          : null;
      if (placed) setErrors(placed.fields);
      // a reused image's LoRA file changed since: said on its own, with the choice of the file as it is now
      const stale = changedLoras(err, flight.sending);
      setChanged(stale);
      const base = baseChanged(err); // the base model's files changed since: said on its own too
      setStaleBase(base ? flight.baseModel : null);
      const onlyStale = (stale.length > 0 || base) && err instanceof ApiError && stale.length + Number(base) === err.problems.length;
      setGeneral(onlyStale ? null : placed ? placed.general.join("; ") || null : err instanceof Error ? err.message : String(err));
    } finally {
      generating.current = false;
      setBusy(false);
      setRequestId(null);
    }
  };
  // a generation sent before this screen was left goes on on the server: shown as running, its image when done
  useEffect(() => {
    const flight = inFlight();
    if (flight) void follow(flight);
    // eslint-disable-next-line react-hooks/exhaustive-deps -- once, on mount
  }, []);

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
    if (img.steps != null) setSteps(String(img.steps));
    if (img.width != null) setWidth(String(img.width));
    if (img.height != null) setHeight(String(img.height));
    setGuidance(img.guidance != null ? String(img.guidance) : "");
    setNegative(img.negative_prompt ?? "");
    choosePicks(picksOf(img));
    setRefs(referencesOf(img));
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
    steps: Number(steps),
    width: Number(width),
    height: Number(height),
    ...guidanceBody(info.families.find((f) => f.name === family), guidance, negative),
    references: refs.map((r) => r.id),
  };
  const run = (body: GenerateBody, stopped: () => boolean = () => false) =>
    generateWithRetry(
      body,
      job != null && LIVE.has(job.status),
      () => setGeneral("Waiting for the finished training run to release its memory…"),
      stopped,
    );

  const submit = (e: FormEvent) => {
    e.preventDefault();
    void send(picks);
  };
  /** Generate with `sending` as the LoRAs (the picks, or the picks without their sha256); `currentBase`:
   * without the reused image's base identity (the base as it is now). */
  const send = async (sending: LoraPick[], currentBase = false) => {
    if (generating.current || inFlight()) return;
    const rid = newRequestId();
    const { base_identity: identity, ...rest } = settings;
    const body: GenerateBody = { ...rest, ...(identity && !currentBase ? { base_identity: identity } : {}), loras: sending, request_id: rid };
    const flight: InFlight = { requestId: rid, sending, baseModel, cancelled: false, result: Promise.resolve(null as never) };
    flight.result = run(body, () => flight.cancelled);
    track(flight);
    await follow(flight);
  };
  /** Cancel the generation in flight: the server stops it after its current denoising step, or while
   * loading before its next component (a 404: it had not started, or just ended; a wait for the
   * GPU stops retrying). */
  const cancel = async () => {
    const flight = inFlight();
    if (!flight || flight.requestId !== requestId) return;
    flight.cancelled = true;
    try {
      await api.cancelGenerate(flight.requestId);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) setGeneral(err instanceof Error ? err.message : String(err));
    }
  };

  const numberField = (label: string, name: string, value: string, onChange: (v: string) => void) => (
    <Field label={label} error={errors[name.replace(/^gen_/, "")]}>
      <input
        name={name}
        inputMode="numeric"
        value={value}
        onChange={(e) => {
          onChange(e.target.value);
          edited(name.replace(/^gen_/, ""));
        }}
      />
    </Field>
  );

  return (
    <section className="screen">
      <div className="screen-head">
        <h1>Generate</h1>
      </div>
      <ErrorBanner message={fromRunState.error} />
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
            loaded={lorasLoad.data != null}
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
            {numberField("Steps", "gen_steps", steps, setSteps)}
            {numberField("Width", "gen_width", width, setWidth)}
            {numberField("Height", "gen_height", height, setHeight)}
          </div>
          <ErrorBanner message={general} />
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
          <div className="button-row">
            <button type="submit" className="primary" disabled={busy}>
              {busy ? "Generating…" : "Generate"}
            </button>
            {busy && requestId && (
              <button type="button" className="secondary" onClick={cancel}>
                Cancel
              </button>
            )}
          </div>
        </form>
        <GenerateResult
          selected={selected}
          seconds={seconds != null && selected?.file === gallery?.[0]?.file ? seconds : null}
          busy={busy}
          galleryEmpty={!gallery?.length}
          onReuse={reuse}
          deleting={remove.pending}
          onDelete={(img) => void remove.run(img)}
        />
      </div>
      {picks.length === 1 && (
        <StepGrid
          pick={picks[0]}
          body={settings}
          generate={run}
          onDone={() => void loadGallery().catch(() => undefined)}
          busy={busy}
          setBusy={setBusy}
        />
      )}
      <GallerySection
        images={gallery}
        error={galleryError}
        selected={selected?.file ?? null}
        onSelect={setSelected}
        onRetry={() => void loadGallery().catch(() => undefined)}
      />
    </section>
  );
}
