/** Reads a job's `phase`: the last model_load_* / preparing event (a tagged union from the schema). */
import type { Job } from "../api/types";

/**
 * One line for the banner while a job prepares ("Loading transformer…", "Preparing latents: 3/8",
 * "Decoding new images …: 300/10000" while the run's own scan decodes every pixel of the images no
 * check has seen yet, before any model loads: its total grows as it reaches controls and masks),
 * or null when there is no phase.
 */
export function describePhase(phase: Job["phase"]): string | null {
  if (!phase) return null;
  switch (phase.type) {
    case "preparing":
      return phase.phase === "decoding"
        ? `Decoding new images (every pixel, once, before the models load): ${phase.done}/${phase.total}`
        : `Preparing ${phase.phase}: ${phase.done}/${phase.total}`;
    case "model_load_started":
      return `Loading ${phase.component}…`;
    case "model_load_completed":
      return `Loaded ${phase.component} (${phase.seconds.toFixed(1)} s)`;
  }
}
