import type { Info } from "../api/types";
import { href } from "../lib/route";
import { Field } from "./Field";

/** The Train form's one dataset (`data_dir`): the studio's datasets, an unusable one shown but
 * disabled with its problem, a value not among them kept (a cloned run's), and on a home with no
 * dataset yet a link to the Datasets page. */
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
  return (
    <Field label="Dataset" error={error}>
      <select name="data_dir" value={value} onChange={(e) => onChange(e.target.value)}>
        {!datasets.some((d) => d.name === value) && <option value={value}>{value || "— pick one —"}</option>}
        {datasets.map((d) => (
          <option key={d.name} value={d.name} disabled={!d.usable} title={d.problem ?? undefined}>
            {d.name} ({d.images} images){d.usable ? "" : " — unusable: see the Datasets page"}
          </option>
        ))}
      </select>
      {!datasets.length && (
        <span className="field-hint" data-testid="no-dataset">
          No dataset yet: <a href={href("datasets")}>make one</a> from your images and their captions.
        </span>
      )}
    </Field>
  );
}
