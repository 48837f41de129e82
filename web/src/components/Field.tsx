import { type ReactNode, useId, useLayoutEffect, useRef } from "react";

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

/**
 * Mark the form controls inside `box` as described by the element `describedBy` (its error or
 * hint; null: neither) and invalid while `invalid`: a screen reader then reads the field's error
 * with its control, whatever element the field wraps (one input, a picker of several).
 */
export function useDescribedControls(box: { current: HTMLElement | null }, describedBy: string | null, invalid: boolean) {
  useLayoutEffect(() => {
    const controls = box.current?.querySelectorAll<HTMLElement>("input, select, textarea") ?? [];
    for (const el of controls) {
      if (describedBy) el.setAttribute("aria-describedby", describedBy);
      else el.removeAttribute("aria-describedby");
      if (invalid) el.setAttribute("aria-invalid", "true");
      else el.removeAttribute("aria-invalid");
    }
  });
}

/** A labelled form control with its error (from the API's 400 problems) right below it: announced
 * (role=alert) and tied to the control (aria-invalid, aria-describedby), as the hint is when no error. */
export function Field({ label, error, hint, title, children, wide }: Props) {
  const id = useId();
  const box = useRef<HTMLLabelElement | null>(null);
  useDescribedControls(box, error ? `${id}-error` : hint ? `${id}-hint` : null, !!error);
  return (
    <label ref={box} className={`field${error ? " has-error" : ""}${wide ? " wide" : ""}`} title={title}>
      <span className="field-label">{label}</span>
      {children}
      {error ? (
        <span className="field-error" role="alert" id={`${id}-error`}>
          {error}
        </span>
      ) : (
        hint && (
          <span className="field-hint" id={`${id}-hint`}>
            {hint}
          </span>
        )
      )}
    </label>
  );
}
