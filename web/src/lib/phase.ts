/** Reads a job's `phase`: the last model_load_* / preparing event (a tagged union from the schema). */
import type { Job } from "../api/types";

/**
 * One line for the banner while a job prepares ("Loading transformer…", "Preparing latents: 3/8"),
 * or null when there is no phase.
 */
export function describePhase(phase: Job["phase"]): string | null {
  if (!phase) return null;
  switch (phase.type) {
    case "preparing":
      return `Preparing ${phase.phase}: ${phase.done}/${phase.total}`;
    case "model_load_started":
      return `Loading ${phase.component}…`;
    case "model_load_completed":
      return `Loaded ${phase.component} (${phase.seconds.toFixed(1)} s)`;
  }
}
