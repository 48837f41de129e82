/**
 * The Train form's text inputs read as lists and mappings (lib/trainForm.ts re-exports them):
 * sample prompt lines, module names, numbers, "name=number" pairs.
 */

/** The sample prompts of the form's textarea: one per non-blank line, trimmed. */
export function promptLines(text: string | boolean | undefined): string[] {
  return typeof text === "string" ? text.split("\n").map((l) => l.trim()).filter((l) => l !== "") : [];
}

/** Module names of a list input: separated by commas or white space. */
export function nameList(text: string | boolean | undefined): string[] {
  return typeof text === "string" ? text.split(/[\s,]+/).filter((t) => t !== "") : [];
}

/** Numbers separated by commas or white space; undefined when blank, a problem text when one is not a number. */
export function numberList(text: string | boolean | undefined): number[] | string | undefined {
  const items = nameList(text);
  if (!items.length) return undefined;
  const numbers = items.map(Number);
  return numbers.every(Number.isFinite) ? numbers : "must be numbers separated by commas";
}

/** "name=number" pairs separated by commas; undefined when blank, a problem text when malformed. */
export function numberMapping(text: string | boolean | undefined): Record<string, number> | string | undefined {
  const items = typeof text === "string" ? text.split(",").map((t) => t.trim()).filter((t) => t !== "") : [];
  if (!items.length) return undefined;
  const out: Record<string, number> = {};
  for (const item of items) {
    const [name, value, ...rest] = item.split("=").map((t) => t.trim());
    const n = Number(value);
    if (!name || value === undefined || value === "" || rest.length || !Number.isFinite(n)) {
      return "write module=number pairs separated by commas (e.g. to_k=8, to_v=8)";
    }
    out[name] = n;
  }
  return out;
}
