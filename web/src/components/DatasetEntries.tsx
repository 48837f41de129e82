import { useId, useRef } from "react";
import type { DatasetSummary } from "../api/types";
import { useDescribedControls } from "./Field";
import { type EntryRow, emptyRow, parseRows, rowsValue } from "../lib/datasetEntries";
import { markupWords } from "../lib/markupWords";

interface Props {
  /** The form's `datasets` value (rows as a JSON string; "" = one folder, data_dir). */
  value: string;
  /** The one folder of the data_dir form, which becomes the first entry. */
  dataDir: string;
  datasets: DatasetSummary[];
  error?: string;
  onChange: (value: string) => void;
}

/** The free-text inputs of a row: key, label, what a blank means. */
const INPUTS: [keyof EntryRow, string, string][] = [
  ["trigger_word", "Trigger word", "the run's"],
  ["default_caption", "Default caption", "the run's"],
  ["caption_dropout", "Caption dropout", "the run's"],
  ["resolution", "Resolution", "the run's"],
  ["keep_tokens", "Keep tokens", "the run's"],
  ["tag_dropout", "Tag dropout", "the run's"],
  ["loss_weight", "Loss weight", "1"],
];
const TEXT_INPUTS = new Set<keyof EntryRow>(["trigger_word", "default_caption"]);

/**
 * The `datasets` list editor: one row per dataset folder, each with its repeats (or sampling
 * weight), trigger word, default caption, caption dropout, resolution, tag shuffle / keep tokens /
 * tag dropout, loss weight and whether it holds regularisation (class) images (every key of a
 * DatasetEntry; blank = the run's value). With no rows the form
 * trains the one Dataset folder (data_dir); "Several folders" starts the list with it.
 */
export function DatasetEntries({ value, dataDir, datasets, error, onChange }: Props) {
  const rows = parseRows(value);
  const box = useRef<HTMLFieldSetElement | null>(null);
  const errorId = useId();
  useDescribedControls(box, error ? errorId : null, !!error); // its problem read with its controls, as a Field's (RELIABILITY 1918)
  const update = (next: EntryRow[]) => onChange(rowsValue(next));
  const edit = (i: number, key: keyof EntryRow, v: string) => update(rows.map((r, n) => (n === i ? { ...r, [key]: v } : r)));
  if (!rows.length) {
    return (
      <button type="button" name="datasets" className="secondary" onClick={() => update([emptyRow(dataDir), emptyRow()])}>
        Several folders…
      </button>
    );
  }
  return (
    <fieldset ref={box} name="datasets" className="dataset-entries wide" aria-label="dataset folders">
      <legend>Dataset folders (each with its own repeats or weight)</legend>
      {rows.map((row, i) => (
        <div className="entry-row" key={i} data-testid={`entry-${i}`}>
          <select aria-label={`folder ${i + 1}`} value={row.path} onChange={(e) => edit(i, "path", e.target.value)}>
            {!datasets.some((d) => d.name === row.path) && <option value={row.path}>{row.path || "— pick one —"}</option>}
            {datasets.map((d) => (
              <option key={d.name} value={d.name} disabled={!d.usable} title={d.problem ?? undefined}>
                {d.name} ({d.images} images){d.usable ? "" : " — unusable: see the Datasets page"}
                {d.usable && d.markup_captions > 0 ? ` — ${markupWords(d.markup_captions)}` : ""}
              </option>
            ))}
          </select>
          <select aria-label={`sampling ${i + 1}`} value={row.mode} onChange={(e) => edit(i, "mode", e.target.value)}>
            <option value="repeats">repeats</option>
            <option value="weight">weight</option>
          </select>
          <input aria-label={`${row.mode} ${i + 1}`} inputMode="decimal" placeholder="1" value={row.amount} onChange={(e) => edit(i, "amount", e.target.value)} />
          {INPUTS.map(([key, label, placeholder]) => (
            <input
              key={key}
              aria-label={`${label.toLowerCase()} ${i + 1}`}
              title={label}
              placeholder={`${label}: ${placeholder}`}
              inputMode={TEXT_INPUTS.has(key) ? "text" : "decimal"}
              value={String(row[key])}
              onChange={(e) => edit(i, key, e.target.value)}
            />
          ))}
          <select
            aria-label={`shuffle tags ${i + 1}`}
            title="Shuffle tags"
            value={row.shuffle_tags}
            onChange={(e) => edit(i, "shuffle_tags", e.target.value)}
          >
            <option value="">tags: the run's</option>
            <option value="on">shuffle tags</option>
            <option value="off">keep tag order</option>
          </select>
          <label className="check" title="class images: their loss x prior loss weight, never the trigger word">
            <input
              type="checkbox"
              aria-label={`regularisation ${i + 1}`}
              checked={row.regularisation === true}
              onChange={(e) => update(rows.map((r, n) => (n === i ? { ...r, regularisation: e.target.checked } : r)))}
            />
            reg
          </label>
          {row.regularisation && (
            <label className="check" title="the loss target is the base model's own prediction (the LoRA disabled), not the noise">
              <input
                type="checkbox"
                aria-label={`prior prediction ${i + 1}`}
                checked={row.prior_prediction === true}
                onChange={(e) => update(rows.map((r, n) => (n === i ? { ...r, prior_prediction: e.target.checked } : r)))}
              />
              base target
            </label>
          )}
          <button type="button" className="secondary" aria-label={`remove folder ${i + 1}`} onClick={() => update(rows.filter((_, n) => n !== i))}>
            ✕
          </button>
        </div>
      ))}
      <button type="button" className="secondary" onClick={() => update([...rows, emptyRow()])}>
        Add folder
      </button>
      {error && (
        <span className="field-error" role="alert" id={errorId}>
          {error}
        </span>
      )}
    </fieldset>
  );
}
