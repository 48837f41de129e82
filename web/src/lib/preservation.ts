/**
 * The Train form's `preservation` setting (differential output preservation): its three inputs
 * (class word, weight, prompts one per line) kept in the form as one JSON string, and turned
 * into the config's object. Pure functions, no React.
 */
import type { TrainConfig } from "../api/types";

export type Preservation = NonNullable<TrainConfig["preservation"]>;

/** The inputs' texts ("" = unset: off without a class word; weight 1; the captions). */
export interface PreservationInputs {
  class_word: string;
  weight: string;
  prompts: string;
}

export const NO_PRESERVATION: PreservationInputs = { class_word: "", weight: "", prompts: "" };

/** The inputs held in the form value (a JSON string); all blank when blank or unreadable. */
export function parsePreservation(value: string | boolean | undefined): PreservationInputs {
  if (typeof value !== "string" || value.trim() === "") return { ...NO_PRESERVATION };
  try {
    return { ...NO_PRESERVATION, ...(JSON.parse(value) as Partial<PreservationInputs>) };
  } catch {
    return { ...NO_PRESERVATION };
  }
}

/** The form value of the inputs ("" when all are blank). */
export function preservationValue(inputs: PreservationInputs): string {
  return Object.values(inputs).some((v) => v.trim() !== "") ? JSON.stringify(inputs) : "";
}

/** The form value of a config's `preservation` (e.g. a run being cloned); "" for none. */
export function preservationFromConfig(p: Preservation | null | undefined): string {
  if (!p) return "";
  return preservationValue({
    class_word: p.class_word,
    weight: p.weight == null || p.weight === 1 ? "" : String(p.weight),
    prompts: (p.prompts ?? []).join("\n"),
  });
}

/** The config's `preservation` (undefined: off), or the problem found (a text). */
export function buildPreservation(inputs: PreservationInputs): Preservation | undefined | string {
  const classWord = inputs.class_word.trim();
  const prompts = inputs.prompts.split("\n").map((l) => l.trim()).filter((l) => l !== "");
  if (!classWord) return inputs.weight.trim() || prompts.length ? "set the class word (it turns preservation on)" : undefined;
  const out: Preservation = { class_word: classWord };
  if (inputs.weight.trim() !== "") {
    const n = Number(inputs.weight);
    if (!Number.isFinite(n)) return "weight must be a number";
    out.weight = n;
  }
  if (prompts.length) out.prompts = prompts;
  return out;
}
