/**
 * A resume of a run whose base or dataset moved (a studio home moved or renamed: RELIABILITY 801).
 * The server refuses it (400 ConfigError) with one problem per recorded path that has nothing at it
 * any more (training/resume/relocation.py `moved_problems`): field "base_model", "base_config" or
 * "data_dir", or "datasets.N.path" for entry N of a multi-dataset run, message "nothing at <old
 * path> any more ...". The resume may then name each anew in its `settings` (an entry alone as
 * "datasets.N.path": the server keeps the run's other entries and settings). Pure functions, no React.
 */
import { ApiError } from "../api/client";
import { problemField } from "./problems";

/** The settings a resume may name anew, with what the web UI calls them. */
export const MOVABLE = {
  base_model: "Base model",
  base_config: "Base model config",
  data_dir: "Dataset",
} as const;

/** A setting a resume may name anew: a MOVABLE one, or the path of a multi-dataset run's entry N. */
export type Movable = keyof typeof MOVABLE | `datasets.${number}.path`;

export interface MovedPath {
  field: Movable;
  /** The server's message: the old path, and what to name instead. */
  message: string;
}

const ENTRY = /^datasets\.(\d+)\.path$/;

const isMovable = (field: string): field is Movable => Object.hasOwn(MOVABLE, field) || ENTRY.test(field);

/** What the web UI calls a moved setting: "Dataset", "Dataset entry 2" (datasets.1.path) ... */
export function movedLabel(field: Movable): string {
  const entry = ENTRY.exec(field);
  return entry ? `Dataset entry ${Number(entry[1]) + 1}` : MOVABLE[field as keyof typeof MOVABLE];
}

/** The moved paths a refused resume names (none: `err` is another refusal). */
export function movedPaths(err: unknown): MovedPath[] {
  if (!(err instanceof ApiError) || err.status !== 400) return [];
  const out: MovedPath[] = [];
  for (const p of err.problems) {
    const field = problemField(p.field).replace(/^settings\./, "");
    if (isMovable(field) && p.message.startsWith("nothing at ") && !out.some((m) => m.field === field))
      out.push({ field, message: p.message });
  }
  return out;
}

/** The refusal's other problems, as "field: message" (or the error's message when it has none listed). */
export function otherProblems(err: unknown, moved: readonly MovedPath[]): string[] {
  if (!(err instanceof ApiError)) return [err instanceof Error ? err.message : String(err)];
  if (!err.problems.length) return [err.message];
  const named = new Set(moved.map((m) => m.field));
  return err.problems
    .filter((p) => !named.has(problemField(p.field).replace(/^settings\./, "") as Movable))
    .map((p) => (p.field ? `${p.field}: ${p.message}` : p.message));
}

/** The resume's `settings` naming each moved path where the user says it is now (blank ones left out). */
export function relocatedSettings(moved: readonly MovedPath[], values: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const { field } of moved) {
    const v = values[field]?.trim();
    if (v) out[field] = v;
  }
  return out;
}

/** Whether every moved path has been named anew. */
export function allRelocated(moved: readonly MovedPath[], values: Readonly<Record<string, string>>): boolean {
  return Object.keys(relocatedSettings(moved, values)).length === moved.length;
}
