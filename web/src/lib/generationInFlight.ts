/**
 * The generation in flight, kept outside the Generate screen: a POST /api/generate goes on while
 * the user looks at another screen of the app (the server renders it to the end), so a Generate
 * screen mounted meanwhile shows it as running (Generating…, Cancel) and shows its image when it
 * ends, instead of an idle form whose image never appears. One at a time (the screen sends one).
 * While it runs, a reload or closing the tab asks first (lib/leaveGuard).
 */
import type { GenerateResult } from "../api/types";
import type { LoraPick } from "../components/LoraPicker";
import { holdLeave } from "./leaveGuard";

export interface InFlight {
  /** The request id (for Cancel). */
  requestId: string;
  /** The LoRAs it sent (to name those the server refuses as changed). */
  sending: LoraPick[];
  /** The base model it sent (to name it when the server refuses it as changed). */
  baseModel: string;
  /** Whether Cancel was pressed (its 409 is then "cancelled", and a wait for the GPU stops retrying). */
  cancelled: boolean;
  /** Its answer (or refusal). */
  result: Promise<GenerateResult>;
}

let current: InFlight | null = null;

/** Record `flight` as the generation in flight until its answer comes (then it is forgotten). */
export function track(flight: InFlight): void {
  current = flight;
  holdLeave("generation", true); // a reload or closing the tab would stop it: the browser asks first
  const forget = () => {
    if (current !== flight) return;
    current = null;
    holdLeave("generation", false);
  };
  flight.result.then(forget, forget);
}

/** The generation in flight now (null: none). */
export function inFlight(): InFlight | null {
  return current;
}

/** Forget the generation in flight (tests: each starts with none). */
export function forgetGeneration(): void {
  current = null;
  holdLeave("generation", false);
}
