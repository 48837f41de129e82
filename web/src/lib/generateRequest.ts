/** The Generate screen's request helpers: the POST with its GPU-busy retries, a request id for
 * Cancel, and a reused gallery image's base settings. */
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { GalleryImage, GenerateBody, GenerateResult } from "../api/types";

const GPU_RETRIES = 15;

/** The reused image's revision / v_prediction, while `baseModel` is still the image's base model. */
export function reusedBaseSettings(
  reused: Pick<GalleryImage, "base_model" | "revision" | "v_prediction"> | null,
  baseModel: string,
): Pick<GenerateBody, "revision" | "v_prediction"> {
  if (!reused || reused.base_model !== baseModel) return {};
  return {
    ...(reused.revision != null ? { revision: reused.revision } : {}),
    ...(reused.v_prediction != null ? { v_prediction: reused.v_prediction } : {}),
  };
}

/** POST /api/generate, retrying a 409 for a while when no job is live (a finished run may still
 * be releasing the GPU). `onWait` is told while it waits. */
export async function generateWithRetry(
  body: GenerateBody,
  jobLive: boolean,
  onWait: () => void,
  stopped: () => boolean,
): Promise<GenerateResult> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await api.generate(body);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 409) || jobLive || stopped() || attempt >= GPU_RETRIES) throw err;
      onWait();
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/** A request id for the cancel route (its rule: letters, digits, - and _), random; from
 * getRandomValues, which (unlike randomUUID) works on a plain-http LAN address too. */
export function newRequestId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `gen-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}
