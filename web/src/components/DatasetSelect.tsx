import type { Info } from "../api/types";
import { MARKUP_UNCOUNTED, markupWords } from "../lib/markupWords";
import { href } from "../lib/route";
import { Field } from "./Field";

/** The Train form's one dataset (`data_dir`): the studio's datasets, an unusable one shown but
 * disabled with its problem, a value not among them kept (a cloned run's), one whose captions hold
 * markup a fresh run refuses (`markup_captions`, RELIABILITY 1862) says how many (and that a
 * metadata.jsonl too large for the listing was not counted: `markup_counted`, 2072), and on a home
 * with no dataset yet a link to the Datasets page. */
export function DatasetSelect({
  datasets,
  value,
  error,
  onChange,
}: {
  datasets: Info["datasets"];
  value: string;
  error?: string;
  onChange: (value: string) => void;
}) {
  const picked = datasets.find((d) => d.name === value);
  return (
    <Field label="Dataset" error={error}>
      <select name="data_dir" value={value} onChange={(e) => onChange(e.target.value)}>
        {!datasets.some((d) => d.name === value) && <option value={value}>{value || "— pick one —"}</option>}
        {datasets.map((d) => (
          <option key={d.name} value={d.name} disabled={!d.usable} title={d.problem ?? undefined}>
            {d.name} ({d.images} images){d.usable ? "" : " — unusable: see the Datasets page"}
            {d.usable && d.markup_captions > 0 ? ` — ${markupWords(d.markup_captions)}` : ""}
          </option>
        ))}
      </select>
      {picked && picked.markup_captions > 0 && (
        <span className="field-hint warn-text" role="note" data-testid="dataset-markup">
          {markupWords(picked.markup_captions)}: <a href={href("datasets", picked.name)}>its page</a> names each under
          its image.
        </span>
      )}
      {picked && picked.usable && !picked.markup_counted && (
        <span className="field-hint warn-text" role="note" data-testid="dataset-markup-uncounted">
          {MARKUP_UNCOUNTED}
        </span>
      )}
      {!datasets.length && (
        <span className="field-hint" data-testid="no-dataset">
          No dataset yet: <a href={href("datasets")}>make one</a> from your images and their captions.
        </span>
      )}
    </Field>
  );
}
