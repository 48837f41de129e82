/**
 * Following a generation sent to the asynchronous form (POST /api/generations answers 202 at once;
 * GET /api/generations/{id} tells its phase, its denoising step, then its image or its error). No
 * request stays open while the image is made, so a reverse proxy's read timeout (nginx: 60 s) never
 * cuts it, and a reload finds it again by its id (lib/generationInFlight keeps the id in the tab).
 */
import { ApiError, type FieldProblem } from "../api/client";
import { api } from "../api/endpoints";
import type { GenerateResult, GenerationStatus } from "../api/types";

/** Milliseconds before poll `n` (0-based): soon at first (a small image is done in a second or two), then every second. */
export function pollDelay(n: number): number {
  return n < 4 ? 250 : 1000;
}

/** Polls that may fail in a row (a proxy's 502 while the server restarts, a dropped connection) before the error is said. */
const MISSES = 5;

/** What the user reads of a generation in flight: "Waiting for the GPU…", "Loading the model…", "Step 3 of 20", "Saving…". */
export function progressWords(status: GenerationStatus): string {
  switch (status.state) {
    case "queued":
      return "Waiting for the GPU…";
    case "loading":
      return "Loading the model…";
    case "generating":
      return status.steps > 0 ? `Step ${status.step} of ${status.steps}` : "Generating…";
    case "saving":
      return "Saving…";
    default:
      return "";
  }
}

/** The error of a failed or cancelled generation, as the synchronous form would have answered it (its status, its problems). */
export function errorOf(status: GenerationStatus): ApiError {
  const e = status.error;
  if (!e) return new ApiError(500, `generation ${status.state} without an error`, [], status);
  const problems: FieldProblem[] = (e.problems ?? []).map((p) => (typeof p === "string" ? { field: "", message: p } : p));
  return new ApiError(e.status, e.detail, problems, e);
}

/** The server no longer knows the generation (it restarted, or it ended long ago). */
export class GenerationGone extends ApiError {
  constructor() {
    super(404, "The server no longer knows this generation (did it restart?): if it was made, its image is in the gallery.", [], null);
  }
}

/**
 * Follow generation `requestId` to its end: its image (done), or an ApiError (failed, cancelled: the
 * server's error and status; GenerationGone: unknown to the server). `first`: the POST's answer (no
 * GET before it); `onProgress` is told each status.
 */
export async function followGeneration(
  requestId: string,
  first: GenerationStatus | null,
  onProgress: (status: GenerationStatus) => void = () => undefined,
): Promise<GenerateResult> {
  let status = first;
  let misses = 0;
  for (let n = 0; ; n++) {
    if (status) {
      onProgress(status);
      if (status.state === "done" && status.image) return status.image;
      if (status.state === "failed" || status.state === "cancelled" || status.state === "interrupted") throw errorOf(status);
      await new Promise((r) => setTimeout(r, pollDelay(n)));
    }
    try {
      status = await api.generation(requestId);
      misses = 0;
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) throw new GenerationGone();
      if (++misses >= MISSES) throw err;
      status = null;
      await new Promise((r) => setTimeout(r, pollDelay(n)));
    }
  }
}
