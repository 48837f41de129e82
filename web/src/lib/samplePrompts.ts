/**
 * Sample prompts in the train form, one TrainConfig sample_prompts entry per non-blank line:
 * - "a red circle": a prompt;
 * - "make it blue || control/a.png, control_2/a.png": a prompt with an edit family's reference images
 *   (paths in the dataset, slot order; nothing after "||" renders without any) -> {prompt, controls};
 * - a line starting with "{": a JSON SamplePrompt object, for a prompt with its own size, seed or guidance
 *   (and references): {"prompt": "a dog", "width": 768, "seed": 3, "controls": ["control/a.png"]}.
 * Pure functions.
 */

/** Separates a sample prompt from its reference images in the form: "make it blue || control/a.png". */
export const REFERENCES_SEPARATOR = "||";

/** A sample_prompts entry: a prompt, or an object with its references and/or its own settings. */
export type SamplePromptEntry =
  | string
  | { prompt: string; controls?: string[] | null; width?: number; height?: number; seed?: number; guidance?: number };

/** The entries of the form's textarea (see the module comment), or a problem text for a malformed JSON line. */
export function samplePromptEntries(text: string | boolean | undefined): SamplePromptEntry[] | string {
  const lines = typeof text === "string" ? text.split("\n").map((l) => l.trim()).filter((l) => l !== "") : [];
  const out: SamplePromptEntry[] = [];
  for (const [i, line] of lines.entries()) {
    if (line.startsWith("{")) {
      try {
        const parsed: unknown = JSON.parse(line);
        if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("not an object");
        out.push(parsed as SamplePromptEntry);
      } catch {
        return `line ${i + 1} starts with "{" but is not a JSON object like {"prompt": "a cat", "seed": 3}`;
      }
      continue;
    }
    const at = line.indexOf(REFERENCES_SEPARATOR);
    if (at < 0) {
      out.push(line);
      continue;
    }
    const controls = line.slice(at + REFERENCES_SEPARATOR.length).split(",").map((c) => c.trim()).filter((c) => c !== "");
    out.push({ prompt: line.slice(0, at).trim(), controls });
  }
  return out;
}

/** A sample_prompts entry as a form line (the inverse of samplePromptEntries): the shortest form that reads back the same. */
export function showSamplePrompt(entry: unknown): string {
  const plainText = (p: string) => !p.startsWith("{") && !p.includes(REFERENCES_SEPARATOR);
  if (entry && typeof entry === "object") {
    // a resolved config lists every setting, null when unset
    const own = Object.fromEntries(Object.entries(entry).filter(([, x]) => x != null)) as Record<string, unknown>;
    const prompt = String(own.prompt ?? "");
    const settings = Object.keys(own).filter((k) => k !== "prompt" && k !== "controls");
    if (settings.length || !plainText(prompt)) return JSON.stringify(own);
    if (!Array.isArray(own.controls)) return prompt;
    return `${prompt} ${REFERENCES_SEPARATOR} ${own.controls.join(", ")}`.trimEnd();
  }
  const text = String(entry);
  return plainText(text) ? text : JSON.stringify({ prompt: text });
}
