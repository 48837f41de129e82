/**
 * Sample prompts in the train form: a line is a prompt, or "prompt || ref, ref" for an edit
 * family's reference images (TrainConfig sample_prompts entries {prompt, controls}). Pure functions.
 */

/** Separates a sample prompt from its reference images in the form: "make it blue || control/a.png". */
export const REFERENCES_SEPARATOR = "||";

/** A sample prompt line of the form: "prompt", or "prompt || ref1, ref2" (an edit family's
 * reference images, paths in the dataset; nothing after "||" renders without any). */
export type SamplePromptEntry = string | { prompt: string; controls: string[] };

export function samplePromptEntries(text: string | boolean | undefined): SamplePromptEntry[] {
  const lines = typeof text === "string" ? text.split("\n").map((l) => l.trim()).filter((l) => l !== "") : [];
  return lines.map((line) => {
    const at = line.indexOf(REFERENCES_SEPARATOR);
    if (at < 0) return line;
    const controls = line.slice(at + REFERENCES_SEPARATOR.length).split(",").map((c) => c.trim()).filter((c) => c !== "");
    return { prompt: line.slice(0, at).trim(), controls };
  });
}

/** A sample_prompts entry as a form line (the inverse of samplePromptEntries). */
export function showSamplePrompt(entry: unknown): string {
  if (entry && typeof entry === "object") {
    const { prompt, controls } = entry as { prompt?: unknown; controls?: unknown };
    if (!Array.isArray(controls)) return String(prompt ?? "");
    return `${String(prompt ?? "")} ${REFERENCES_SEPARATOR} ${controls.join(", ")}`.trimEnd();
  }
  return String(entry);
}
