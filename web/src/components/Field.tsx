import type { ReactNode } from "react";

interface Props {
  label: string;
  /** The server's message for this field, shown under the control. */
  error?: string;
  hint?: string;
  /** A longer description, shown as the tooltip of the whole field. */
  title?: string;
  children: ReactNode;
  wide?: boolean;
}

/** A labelled form control with its error (from the API's 400 problems) right below it. */
export function Field({ label, error, hint, title, children, wide }: Props) {
  return (
    <label className={`field${error ? " has-error" : ""}${wide ? " wide" : ""}`} title={title}>
      <span className="field-label">{label}</span>
      {children}
      {error ? (
        <span className="field-error" role="alert">
          {error}
        </span>
      ) : (
        hint && <span className="field-hint">{hint}</span>
      )}
    </label>
  );
}
