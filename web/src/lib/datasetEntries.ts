/**
 * The Train form's `datasets` entries (several dataset folders in one run): the rows as their
 * inputs hold them (strings), kept in the form as one JSON string, and turned into the
 * config's `datasets` list. Pure functions, no React.
 */
import type { TrainConfig } from "../api/types";

export type DatasetEntry = NonNullable<TrainConfig["datasets"]>[number];

/** One row of the editor: every input's text ("" = unset: the run's value or the default). */
export interface EntryRow {
  path: string;
  /** "repeats" or "weight": how the number in `amount` samples the folder. */
  mode: "repeats" | "weight";
  amount: string;
  trigger_word: string;
  default_caption: string;
  caption_dropout: string;
  resolution: string;
  /** "" = the run's shuffle_tags; "on" / "off" set it for this folder. */
  shuffle_tags: "" | "on" | "off";
  keep_tokens: string;
  tag_dropout: string;
  loss_weight: string;
  /** Class images (prior preservation): their loss x the run's prior_loss_weight, no trigger word. */
  regularisation?: boolean;
  /** With regularisation: the target is the base model's prediction (OneTrainer's prior prediction). */
  prior_prediction?: boolean;
  /** The entry's other settings (none today: every DatasetEntry key has an input), kept as they were. */
  extra?: Record<string, unknown>;
}

export function emptyRow(path = ""): EntryRow {
  return {
    path,
    mode: "repeats",
    amount: "",
    trigger_word: "",
    default_caption: "",
    caption_dropout: "",
    resolution: "",
    shuffle_tags: "",
    keep_tokens: "",
    tag_dropout: "",
    loss_weight: "",
  };
}

/** The rows held in the form value (a JSON string); [] when blank or unreadable. */
export function parseRows(value: string | boolean | undefined): EntryRow[] {
  if (typeof value !== "string" || value.trim() === "") return [];
  try {
    const rows = JSON.parse(value) as unknown;
    return Array.isArray(rows) ? rows.map((r) => ({ ...emptyRow(), ...(r as Partial<EntryRow>) })) : [];
  } catch {
    return [];
  }
}

/** The form value of `rows` ("" when there are none). */
export function rowsValue(rows: EntryRow[]): string {
  return rows.length ? JSON.stringify(rows) : "";
}

/** The form value of a config's `datasets` (e.g. a run being cloned); "" for none. */
export function entriesValue(entries: DatasetEntry[] | null | undefined): string {
  if (!entries?.length) return "";
  const text = (v: unknown) => (v == null ? "" : String(v));
  const shown = new Set([
    "path",
    "repeats",
    "weight",
    "trigger_word",
    "default_caption",
    "caption_dropout",
    "resolution",
    "shuffle_tags",
    "keep_tokens",
    "tag_dropout",
    "loss_weight",
    "regularisation",
    "prior_prediction",
  ]);
  return rowsValue(
    entries.map((e) => ({
      extra: Object.fromEntries(Object.entries(e).filter(([k, v]) => !shown.has(k) && v != null)),
      path: e.path,
      mode: e.weight != null ? "weight" : "repeats",
      amount: text(e.weight ?? e.repeats),
      trigger_word: text(e.trigger_word),
      default_caption: text(e.default_caption),
      caption_dropout: text(e.caption_dropout),
      resolution: text(e.resolution),
      shuffle_tags: e.shuffle_tags == null ? "" : e.shuffle_tags ? "on" : "off",
      keep_tokens: text(e.keep_tokens),
      tag_dropout: text(e.tag_dropout),
      loss_weight: e.loss_weight === 1 ? "" : text(e.loss_weight),
      regularisation: e.regularisation === true,
      prior_prediction: e.prior_prediction === true,
    })),
  );
}

/** The config's `datasets` of the rows, or the first problem found (a text naming the row). */
export function buildEntries(rows: EntryRow[]): DatasetEntry[] | string {
  const out: DatasetEntry[] = [];
  for (const [i, row] of rows.entries()) {
    const where = `folder ${i + 1}`;
    if (!row.path.trim()) return `${where}: pick a dataset`;
    const entry: Record<string, unknown> = { ...(row.extra ?? {}), path: row.path.trim() };
    const numbers: [keyof EntryRow, string, boolean][] = [
      ["amount", row.mode, row.mode === "repeats"],
      ["caption_dropout", "caption_dropout", false],
      ["keep_tokens", "keep_tokens", true],
      ["tag_dropout", "tag_dropout", false],
      ["loss_weight", "loss_weight", false],
    ];
    for (const [key, name, whole] of numbers) {
      const text = String(row[key]).trim();
      if (text === "") continue;
      const n = Number(text);
      if (!Number.isFinite(n)) return `${where}: ${name} must be a number`;
      if (whole && !Number.isInteger(n)) return `${where}: ${name} must be a whole number`;
      entry[name] = n;
    }
    const sides = row.resolution.split(/[\s,]+/).filter((t) => t !== "").map(Number);
    if (sides.some((n) => !Number.isInteger(n))) return `${where}: resolution must be whole numbers separated by commas`;
    if (sides.length) entry.resolution = sides.length === 1 ? sides[0] : sides;
    if (row.trigger_word !== "") entry.trigger_word = row.trigger_word;
    if (row.default_caption !== "") entry.default_caption = row.default_caption;
    if (row.shuffle_tags) entry.shuffle_tags = row.shuffle_tags === "on";
    if (row.regularisation) entry.regularisation = true;
    if (row.regularisation && row.prior_prediction) entry.prior_prediction = true;
    out.push(entry as unknown as DatasetEntry);
  }
  return out;
}
