/** The Generate screen's request helpers: the POST (the asynchronous form, followed to its image) with its GPU-busy retries, a request id for
 * Cancel, a reused gallery image's base settings, and the LoRA files the server says changed. */
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { GalleryImage, GenerateBody, GenerateResult, GenerationStatus } from "../api/types";
import { followGeneration } from "./generationPoll";
import type { LoraPick } from "../components/LoraPicker";

const GPU_RETRIES = 15;

/** The body's steps / width / height of the form's fields: each one left empty is left out (the server then takes
 * the family's, FamilyOut.generation_steps / generation_side, as `lorastudio generate` does). */
export function sizeBody(steps: string, width: string, height: string): Pick<GenerateBody, "steps" | "width" | "height"> {
  const given = Object.entries({ steps, width, height }).filter(([, v]) => v.trim() !== "");
  return Object.fromEntries(given.map(([k, v]) => [k, Number(v)]));
}

/** The reused image's revision / v_prediction and its base's content identity (the server then
 * refuses a base replaced or re-fetched since, instead of rendering another image), while
 * `baseModel` is still the image's base model. */
export function reusedBaseSettings(
  reused: Pick<GalleryImage, "base_model" | "revision" | "v_prediction" | "base_identity"> | null,
  baseModel: string,
): Pick<GenerateBody, "revision" | "v_prediction" | "base_identity"> {
  if (!reused || reused.base_model !== baseModel) return {};
  return {
    ...(reused.revision != null ? { revision: reused.revision } : {}),
    ...(reused.v_prediction != null ? { v_prediction: reused.v_prediction } : {}),
    ...(reused.base_identity != null ? { base_identity: reused.base_identity } : {}),
  };
}

/** A run's control_resolution as Generate takes it ("pipeline", "target" or a side). */
export type ControlResolution = NonNullable<GenerateBody["control_resolution"]>;

/** `value` (a listing's or gallery image's control_resolution: string | number) as Generate takes it; null: none or not one. */
export function controlResolutionOf(value: string | number | null | undefined): ControlResolution | null {
  if (typeof value === "number") return value;
  if (value === "pipeline" || value === "target") return value;
  return value != null && /^\d+$/.test(value) ? Number(value) : null;
}

/** A reused image's (or preview's) references and the control_resolution they were sized by. */
export interface ReusedControls {
  ids: string[];
  resolution: ControlResolution;
}

/** The request's control_resolution: the reused one while the form's references are still those it
 * came with (another reference set is fitted to the output size, as any), else nothing (RELIABILITY 1652). */
export function reusedControlSettings(reused: ReusedControls | null, refs: { id: string }[]): Pick<GenerateBody, "control_resolution"> {
  if (!reused || !refs.length || refs.length !== reused.ids.length || refs.some((r, i) => r.id !== reused.ids[i])) return {};
  return { control_resolution: reused.resolution };
}

/** Whether the server refused the request because the base model's files changed since the reused
 * image was made (its 400 problem `base_identity`). */
export function baseChanged(err: unknown): boolean {
  return err instanceof ApiError && err.status === 400 && err.problems.some((p) => /^(?:body\.)?base_identity$/.test(p.field));
}

/** Send a generation (POST /api/generations: 202 at once) and follow it to its image
 * (lib/generationPoll), retrying a 409 of the POST for a while when no job is live (a finished run may
 * still be releasing the GPU). `onWait` is told while it waits; `onSent` each request id sent (a
 * retry sends a new one: the server refuses an id whose request ended, RELIABILITY 1051), before it
 * is sent; `onProgress` each status. */
export async function generateWithRetry(
  body: GenerateBody,
  jobLive: boolean,
  onWait: () => void,
  stopped: () => boolean,
  onSent: (requestId: string) => void = () => undefined,
  onProgress?: (status: GenerationStatus) => void,
): Promise<GenerateResult> {
  for (let attempt = 0; ; attempt++) {
    const sent = attempt === 0 && body.request_id ? body : { ...body, request_id: newRequestId() };
    const requestId = sent.request_id as string;
    onSent(requestId);
    let first: GenerationStatus;
    try {
      first = await api.startGeneration(sent, null); // a flight of its own (lib/generationInFlight): followed by whichever screen is open
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 409) || jobLive || stopped() || attempt >= GPU_RETRIES) throw err;
      onWait();
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    if (stopped()) void api.cancelGenerate(first.request_id, null).catch(() => undefined); // Cancel pressed before it was known
    return followGeneration(first.request_id, first, onProgress);
  }
}

/** A request id for the cancel route (its rule: letters, digits, - and _), random; from
 * getRandomValues, which (unlike randomUUID) works on a plain-http LAN address too. */
export function newRequestId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `gen-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** A gallery image's LoRAs as picks, each with the sha256 of the file that made it (the server
 * then refuses a file retrained or replaced since, instead of rendering another image). */
export function picksOf(img: Pick<GalleryImage, "loras">): LoraPick[] {
  return (img.loras ?? []).map((l) => ({
    name: l.name,
    scale: l.scale ?? 1,
    step: l.step ?? null,
    ...(l.weights === "ema" && l.step != null ? { weights: "ema" as const } : {}),
    ...(l.sha256 ? { sha256: l.sha256 } : {}),
  }));
}

/** The picks the server refused because their file is no longer the one of their sha256 (its
 * 400 problems `loras.N.sha256`), as "name" / "name (raw, step N)"; empty for any other error. */
export function changedLoras(err: unknown, sent: readonly LoraPick[]): string[] {
  if (!(err instanceof ApiError) || err.status !== 400) return [];
  const out: string[] = [];
  for (const p of err.problems) {
    const at = /^(?:body\.)?loras\.(\d+)\.sha256$/.exec(p.field);
    const pick = at ? sent[Number(at[1])] : undefined;
    if (pick) out.push(pick.step == null ? pick.name : `${pick.name} (${pick.weights === "ema" ? "EMA" : "raw"}, step ${pick.step})`);
  }
  return out;
}

/** `picks` without their sha256: the LoRA files as they are now. */
export const currentFiles = (picks: readonly LoraPick[]): LoraPick[] => picks.map(({ sha256: _, ...rest }) => rest);

/** The description of a Generate field left to the family (RELIABILITY 1842): its placeholder alone ("1024")
 * looked like a value typed, and a screen reader read it as the field's value. */
export function familyHint(placeholder?: string): string | undefined {
  if (placeholder == null) return undefined;
  return /^\d+$/.test(placeholder) ? `empty: the family's ${placeholder}` : "empty: the family's";
}
