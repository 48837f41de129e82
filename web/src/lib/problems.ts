/**
 * Where a form shows each problem of the server's 400 answer: next to the input of the field it
 * names, or, when the form has no input for that field, in the form's general list, so that no
 * problem is dropped. Pure functions, no React.
 */
import type { FieldProblem } from "../api/client";

export interface PlacedProblems {
  /** field -> its message(s) (several joined with "; "), for the inputs the form shows. */
  fields: Record<string, string>;
  /** "field: message" (or the message alone) of the problems no shown input can take. */
  general: string[];
}

/** The field name without the request-body prefixes ("config.lora_rank" -> "lora_rank"). */
export function problemField(field: string): string {
  return field.replace(/^(body\.)?(config\.)?/, "");
}

/**
 * Place `problems` for a form whose inputs are the fields `shown` accepts. A nested field
 * ("sample_prompts.0.width", "datasets.1.resolution", "optimizer_betas.1") goes to its top-level
 * field's input, the rest of its path in front of the message ("#1 width: ...", list positions
 * counted from 1); several problems of one field are all kept.
 */
export function placeProblems(problems: readonly FieldProblem[], shown: (field: string) => boolean): PlacedProblems {
  const fields: Record<string, string[]> = {};
  const general: string[] = [];
  for (const p of problems) {
    const field = problemField(p.field);
    const [top, ...rest] = field.split(".");
    if (field && shown(field)) (fields[field] ??= []).push(p.message);
    else if (top && rest.length && shown(top)) {
      const where = rest.map((part) => (/^\d+$/.test(part) ? `#${Number(part) + 1}` : part)).join(" ");
      (fields[top] ??= []).push(`${where}: ${p.message}`);
    } else general.push(field ? `${field}: ${p.message}` : p.message);
  }
  return { fields: Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, v.join("; ")])), general };
}
