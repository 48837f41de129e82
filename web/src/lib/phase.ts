/** Reads a job's `phase` (the last model_load_* / preparing event, declared as a plain object). */
import type { Job } from "../api/types";

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
const str = (v: unknown): string | null => (typeof v === "string" ? v : null);

/**
 * One line for the banner while a job prepares ("loading transformer…", "latents: 3/8"), or null
 * when the phase is absent or not one of the three event kinds.
 */
export function describePhase(phase: Job["phase"]): string | null {
  if (!phase) return null;
  const component = str(phase.component);
  switch (phase.type) {
    case "preparing": {
      const name = str(phase.phase);
      const done = num(phase.done);
      const total = num(phase.total);
      return name && done != null && total != null ? `Preparing ${name}: ${done}/${total}` : null;
    }
    case "model_load_started":
      return component ? `Loading ${component}…` : null;
    case "model_load_completed": {
      const seconds = num(phase.seconds);
      return component ? `Loaded ${component}${seconds != null ? ` (${seconds.toFixed(1)} s)` : ""}` : null;
    }
    default:
      return null;
  }
}
