/**
 * "Generate again" of a sample preview: what the Generate form receives to render that preview
 * again (the listing's `seed`, `width`, `height`, `guidance`, `steps`, `max_sequence_length` and `lora`:
 * training/sample_source.py) and its reference images (an edit family's: uploaded again as
 * Generate's references), or why Generate cannot (its `note`: RELIABILITY 696).
 */
import { api } from "../api/endpoints";
import type { RunDetail, SampleImage, UploadedReference } from "../api/types";
import type { LoraPick } from "../components/LoraPicker";
import { type ControlResolution, controlResolutionOf } from "./generateRequest";
import { loadMessage, useLoad } from "./latest";
import { href } from "./route";

/** The route of "Generate again" of prompt `index`'s preview of step `step` of run `runId`. */
export function againHref(runId: string, step: number, index: number): string {
  return href("again", runId, String(step), String(index));
}

/** What a preview hands the Generate form: every field the preview's render depends on. */
export interface SampleSettings {
  family: string;
  baseModel: string;
  baseConfig: string;
  /** the run's hub revision / prediction type, sent while `baseModel` stays the chosen base */
  revision: string | null;
  vPrediction: boolean | null;
  picks: LoraPick[];
  prompt: string;
  negative: string;
  seed: string;
  steps: string;
  width: string;
  height: string;
  guidance: string;
  /** the text tokens the preview read its prompt to (the run's max_sequence_length; "" where none) */
  tokens: string;
  /** the preview's reference images as Generate's uploads (slot order; [] until uploaded: useSamplePreset) */
  refs: UploadedReference[];
  /** the run's control_resolution its references were sized by (null: none), sent with them (RELIABILITY 1652) */
  controlResolution: ControlResolution | null;
}

/** The hand-over of one preview: its settings (null where Generate cannot render it: `why` says
 * so), and `note`: null where Generate renders the preview's pixels, else why not. */
export interface SampleAgain {
  settings: SampleSettings | null;
  note: string | null;
  why: string | null;
}

const text = (v: number | null | undefined): string => (v == null ? "" : String(v));

/** training/sample_source.py's words for a preview whose references the run sized (its note's last part). */
const SIZED = "its references were sized as the run trains them";

/**
 * The listing's `note` of `sample` as "Generate again" stands: without its part on references the run sized
 * where the form sends the run's control_resolution with them (RELIABILITY 1652: Generate then sizes them as
 * the run did); null where nothing else is said.
 */
export function againNote(sample: SampleImage): string | null {
  const note = sample.note ?? null;
  if (note == null || !sample.references?.length || controlResolutionOf(sample.control_resolution) == null) return note;
  const at = note.indexOf(SIZED);
  return at < 0 ? note : note.slice(0, at).replace(/;\s*$/, "") || null;
}

/** The Generate form's values of `sample`, a preview of `run` (its family, stored config). A
 * preview whose weights no file keeps (`lora` null) or whose prompt the config no longer has
 * gives no settings and the reason. The preview's negative prompt is the pipeline's "" and its
 * LoRA is at strength 1 (training/samples.py). */
export function sampleAgain(sample: SampleImage, run: Pick<RunDetail, "family" | "config">): SampleAgain {
  const note = againNote(sample);
  if (!sample.lora) return { settings: null, note, why: note ?? "no LoRA file keeps the weights it shows" };
  if (sample.prompt == null) return { settings: null, note, why: "the run's config no longer has its prompt" };
  const config = run.config as unknown as Record<string, unknown>;
  const str = (key: string) => (typeof config[key] === "string" ? (config[key] as string) : "");
  return {
    settings: {
      family: run.family,
      baseModel: str("base_model"),
      baseConfig: str("base_config"),
      revision: str("revision") || null,
      vPrediction: typeof config.v_prediction === "boolean" ? config.v_prediction : null,
      picks: [{ name: sample.lora.name, scale: 1, step: sample.lora.step ?? null, ...(sample.lora.weights === "ema" ? { weights: "ema" as const } : {}) }],
      prompt: sample.prompt,
      negative: "",
      seed: text(sample.seed),
      steps: text(sample.steps),
      width: text(sample.width),
      height: text(sample.height),
      guidance: text(sample.guidance),
      tokens: text(sample.max_sequence_length),
      refs: [],
      controlResolution: sample.references?.length ? controlResolutionOf(sample.control_resolution) : null,
    },
    note,
    why: null,
  };
}

/** Which preview a Generate screen was opened for ("Generate again"). */
export interface SampleRef {
  runId: string;
  step: number;
  index: number;
}

export interface SamplePreset extends SampleAgain {
  /** the run's output name (null until loaded) */
  runName: string | null;
}

/** Load the run and its previews' listing for `ref` (undefined: none). `preset` is null until
 * loaded (and where it could not be: `error` says why); `pending` while loading. */
export function useSamplePreset(ref: SampleRef | undefined): { preset: SamplePreset | null; error: string | null; pending: boolean } {
  const loaded = useLoad(
    ref
      ? (signal) =>
          Promise.all([api.run(ref.runId, signal), api.runSamples(ref.runId, signal, { step: ref.step })]).then(async ([run, list]) => {
            const sample = list.samples.find((s) => s.step === ref.step && s.index === ref.index);
            if (!sample) {
              const why = `run ${run.output_name} has no preview ${ref.index + 1} of step ${ref.step} (deleted since?)`;
              return { settings: null, note: null, why, runName: run.output_name };
            }
            const again = sampleAgain(sample, run);
            if (again.settings && sample.references?.length) again.settings.refs = await uploadAgain(sample.references, signal);
            return { ...again, runName: run.output_name };
          })
      : null,
    ref ?? null,
  );
  const error = loaded.error
    ? `Cannot open run ${ref?.runId}: ${loadMessage(loaded.error, "it was deleted (in another tab or with the CLI)")}`
    : null;
  return { preset: loaded.data, error, pending: ref != null && loaded.loading };
}

/** The run's copies of a preview's references (their URLs), read and uploaded as Generate's
 * references (POST /api/generate/references keeps the bytes: the same images), slot order. */
async function uploadAgain(urls: readonly string[], signal: AbortSignal): Promise<UploadedReference[]> {
  const files = await Promise.all(
    urls.map(async (url) => {
      const res = await fetch(api.imageUrl(url), { signal });
      if (!res.ok) throw new Error(`cannot read its reference image ${url} (HTTP ${res.status})`);
      const blob = await res.blob();
      return new File([blob], url.split("/").pop() || "reference.png", { type: blob.type });
    }),
  );
  return (await api.uploadReferences(files, signal)).references; // for this load only
}
