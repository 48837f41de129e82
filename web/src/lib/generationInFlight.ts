/**
 * The generation in flight, kept outside the Generate screen: a generation goes on while the user
 * looks at another screen of the app (the server renders it to the end), so a Generate screen
 * mounted meanwhile shows it as running (its progress, Cancel) and shows its image when it ends,
 * instead of an idle form whose image never appears. One at a time (the screen sends one).
 *
 * It is sent to the asynchronous form (lib/generationPoll): a reload or a closed tab no longer stops
 * it, so nothing asks before leaving; its request id is kept in the tab's sessionStorage from before
 * it is sent until it ends, and the Generate screen of a reloaded page follows it again (`resumed`).
 */
import type { GenerateResult, GenerationStatus } from "../api/types";
import type { LoraPick } from "../components/LoraPicker";
import { followGeneration } from "./generationPoll";

export interface InFlight {
  /** The request id (for Cancel; a retry of the POST sends a new one: `sent`). */
  requestId: string;
  /** The LoRAs it sent (to name those the server refuses as changed). */
  sending: LoraPick[];
  /** The base model it sent (to name it when the server refuses it as changed). */
  baseModel: string;
  /** Whether Cancel was pressed (its outcome is then "cancelled", and a wait for the GPU stops retrying). */
  cancelled: boolean;
  /** Its answer (or refusal). */
  result: Promise<GenerateResult>;
  /** Its last status (null: none yet). */
  status: GenerationStatus | null;
  /** Told each status (the screen that shows it; null: none). */
  watch: ((status: GenerationStatus) => void) | null;
  /** Found again after a reload (its id from the tab's storage): a server that no longer knows it says nothing. */
  resumed: boolean;
}

const KEY = "lorastudio.generation"; // sessionStorage: the request id of the generation in flight

let current: InFlight | null = null;

function remember(requestId: string | null): void {
  try {
    if (requestId) window.sessionStorage.setItem(KEY, requestId);
    else window.sessionStorage.removeItem(KEY);
  } catch {
    // storage refused (private mode, quota): a reload then no longer finds it; its image still lands in the gallery
  }
}

/** A new flight (not tracked yet): give its `result` the generation's promise, then `track` it. */
export function newFlight(requestId: string, sending: LoraPick[], baseModel: string): InFlight {
  return { requestId, sending, baseModel, cancelled: false, result: Promise.resolve(null as never), status: null, watch: null, resumed: false };
}

/** `flight`'s request id is now `requestId` (before its POST is sent): kept in the tab for a reload. */
export function sent(flight: InFlight, requestId: string): void {
  flight.requestId = requestId;
  if (current === flight || current === null) remember(requestId);
}

/** `flight` has a new status: kept, and told to the screen that shows it. */
export function progressed(flight: InFlight, status: GenerationStatus): void {
  flight.status = status;
  flight.watch?.(status);
}

/** Record `flight` as the generation in flight until its answer comes (then it is forgotten). */
export function track(flight: InFlight): void {
  current = flight;
  remember(flight.requestId);
  const forget = () => {
    if (current !== flight) return;
    current = null;
    remember(null);
  };
  flight.result.then(forget, forget);
}

/** The generation in flight now (null: none). */
export function inFlight(): InFlight | null {
  return current;
}

/** The generation this tab sent before a reload, followed again (tracked), or null: none kept. */
export function resumed(): InFlight | null {
  if (current) return current;
  let requestId: string | null = null;
  try {
    requestId = window.sessionStorage.getItem(KEY);
  } catch {
    return null;
  }
  if (!requestId) return null;
  const flight = { ...newFlight(requestId, [], ""), resumed: true };
  flight.result = followGeneration(requestId, null, (s) => progressed(flight, s));
  track(flight);
  return flight;
}

/** Forget the generation in flight (tests: each starts with none). */
export function forgetGeneration(): void {
  current = null;
  remember(null);
}
