import type { ReactNode } from "react";
import { CONFIG_DESCRIPTIONS } from "../api/trainConfig.gen";
import type { TrainConfig } from "../api/types";
import type { FormValues } from "../lib/trainForm";
import { Field } from "./Field";

type Key = keyof FormValues;

interface Options {
  hint?: string;
  placeholder?: string;
  wide?: boolean;
  /** Greyed out (the hint says why). */
  disabled?: boolean;
}

interface LineOptions extends Options {
  /** Values the input offers to pick (a datalist: any other text may still be typed). */
  suggestions?: readonly string[];
}

interface NumberOptions extends Options {
  /** A whole-number spin box from 1 to `max` instead of a free numeric text input. */
  max?: number;
}

/** Renderers of the Train form's inputs, each bound to one form value and its server error. */
export interface TrainControls {
  /** The field's value as its input holds it ("" when unset or boolean). */
  text(k: Key): string;
  /** The server's (or the form's) error for the key, if any. */
  error(k: Key): string | undefined;
  /** Set the key's form value (for editors of their own, e.g. PreservationFields). */
  set(k: Key, v: string | boolean): void;
  /** A numeric input (decimal keyboard); blank means "the default". */
  num(k: Key, label: string, opts?: NumberOptions): ReactNode;
  /** A free-text input (with `suggestions`, offered as a datalist). */
  line(k: Key, label: string, opts?: LineOptions): ReactNode;
  /** A multi-line text input. */
  area(k: Key, label: string, opts?: Options): ReactNode;
  /** A checkbox (its server error beside it). */
  check(k: Key, label: string): ReactNode;
  /** A select over `choices` (value -> label); `disabled(value)` greys an option out. */
  choice(k: Key, label: string, choices: Record<string, string>, opts?: Omit<Options, "disabled"> & { disabled?: (v: string) => boolean }): ReactNode;
}

/**
 * Inputs named after their TrainConfig key (`name="save_every"`), labelled, with the server's
 * error for the key below them and the config's field description as their tooltip.
 */
export function trainControls(
  values: FormValues,
  errors: Record<string, string>,
  set: (k: Key, v: string | boolean) => void,
): TrainControls {
  const text = (k: Key) => (typeof values[k] === "string" ? (values[k] as string) : "");
  const title = (k: Key) => CONFIG_DESCRIPTIONS[k as keyof TrainConfig];
  const field = (k: Key, label: string, opts: Pick<Options, "hint" | "wide">, control: ReactNode) => (
    <Field label={label} error={errors[k]} hint={opts.hint} title={title(k)} wide={opts.wide}>
      {control}
    </Field>
  );
  return {
    text,
    error: (k) => errors[k],
    set,
    num: (k, label, opts = {}) =>
      field(
        k,
        label,
        opts,
        opts.max != null ? (
          <input
            name={k}
            type="number"
            min={1}
            max={opts.max}
            step={1}
            value={text(k)}
            disabled={opts.disabled}
            placeholder={opts.placeholder ?? "default"}
            onChange={(e) => set(k, e.target.value)}
          />
        ) : (
          <input
            name={k}
            inputMode="decimal"
            value={text(k)}
            disabled={opts.disabled}
            placeholder={opts.placeholder ?? "default"}
            onChange={(e) => set(k, e.target.value)}
          />
        ),
      ),
    line: (k, label, opts = {}) =>
      field(
        k,
        label,
        opts,
        <>
          <input
            name={k}
            value={text(k)}
            placeholder={opts.placeholder}
            list={opts.suggestions?.length ? `${k}-suggestions` : undefined}
            onChange={(e) => set(k, e.target.value)}
          />
          {opts.suggestions?.length ? (
            <datalist id={`${k}-suggestions`} data-testid={`${k}-suggestions`}>
              {opts.suggestions.map((s) => (
                <option key={s} value={s} />
              ))}
            </datalist>
          ) : null}
        </>,
      ),
    area: (k, label, opts = {}) =>
      field(k, label, opts, <textarea name={k} rows={3} value={text(k)} placeholder={opts.placeholder} onChange={(e) => set(k, e.target.value)} />),
    check: (k, label) => (
      <label className={`check${errors[k] ? " has-error" : ""}`} title={title(k)}>
        <input
          type="checkbox"
          name={k}
          checked={values[k] === true}
          onChange={(e) => set(k, e.target.checked)}
          // its problem read with it, as a Field's (RELIABILITY 1918)
          aria-invalid={errors[k] ? true : undefined}
          aria-describedby={errors[k] ? `${k}-check-error` : undefined}
        />
        {label}
        {errors[k] && (
          <span className="field-error" role="alert" id={`${k}-check-error`}>
            {errors[k]}
          </span>
        )}
      </label>
    ),
    choice: (k, label, choices, opts = {}) =>
      field(
        k,
        label,
        opts,
        <select name={k} value={text(k)} onChange={(e) => set(k, e.target.value)}>
          {Object.entries(choices).map(([v, l]) => (
            <option key={v} value={v} disabled={opts.disabled?.(v) ?? false}>
              {l}
            </option>
          ))}
        </select>,
      ),
  };
}
