import { useId } from "react";
import { movedLabel, type MovedPath } from "../lib/relocation";

interface Props {
  moved: readonly MovedPath[];
  values: Readonly<Record<string, string>>;
  onChange: (field: string, value: string) => void;
  disabled?: boolean;
}

/**
 * The inputs a resume of a run whose base or dataset moved shows (lib/relocation.ts): one per path
 * the server found nothing at, labelled with what it is, described by the server's message (the old
 * path, and what to name: a name under models/ or datasets/, or a path). Renders nothing when none moved.
 */
export function MovedPathFields({ moved, values, onChange, disabled }: Props) {
  const id = useId();
  if (!moved.length) return null;
  return (
    <fieldset className="moved-paths" data-testid="moved-paths">
      <legend>Where is it now?</legend>
      {moved.map(({ field, message }) => (
        <div key={field} className="moved-path">
          <label>
            {`${movedLabel(field)} (${field}) now at`}
            <input
              name={`moved_${field}`}
              value={values[field] ?? ""}
              disabled={disabled}
              required
              onChange={(e) => onChange(field, e.target.value)}
              aria-describedby={`${id}-${field.replaceAll(".", "-")}`}
            />
          </label>
          <p className="field-error" id={`${id}-${field.replaceAll(".", "-")}`}>
            {message}
          </p>
        </div>
      ))}
    </fieldset>
  );
}
