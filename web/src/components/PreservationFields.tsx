import { useId, useRef } from "react";
import { useDescribedControls } from "./Field";
import { type PreservationInputs, parsePreservation, preservationValue } from "../lib/preservation";

interface Props {
  /** The form's `preservation` value (the inputs as a JSON string; "" = off). */
  value: string;
  error?: string;
  onChange: (value: string) => void;
}

/**
 * Differential output preservation's inputs: the class word (blank = off), its weight and
 * optional prompts (one per line; blank = the captions with the trigger word replaced). States
 * the cost per step, as the preflight does.
 */
export function PreservationFields({ value, error, onChange }: Props) {
  const inputs = parsePreservation(value);
  const box = useRef<HTMLFieldSetElement | null>(null);
  const errorId = useId();
  useDescribedControls(box, error ? errorId : null, !!error); // its problem read with its controls (RELIABILITY 1918)
  const edit = (key: keyof PreservationInputs, v: string) => onChange(preservationValue({ ...inputs, [key]: v }));
  return (
    <fieldset ref={box} name="preservation" className="preservation wide" aria-label="output preservation">
      <legend>Output preservation (the base model's output on the class, kept)</legend>
      <input
        aria-label="preservation class word"
        placeholder="class word, e.g. person (blank: off)"
        value={inputs.class_word}
        onChange={(e) => edit("class_word", e.target.value)}
      />
      <input aria-label="preservation weight" inputMode="decimal" placeholder="weight: 1" value={inputs.weight} onChange={(e) => edit("weight", e.target.value)} />
      <textarea
        aria-label="preservation prompts"
        rows={2}
        placeholder="prompts, one per line (blank: the captions with the trigger word replaced by the class word)"
        value={inputs.prompts}
        onChange={(e) => edit("prompts", e.target.value)}
      />
      <span className="hint">needs a trigger word; costs one extra no-grad forward + one extra forward/backward per micro-batch</span>
      {error && (
        <span className="field-error" role="alert" id={errorId}>
          {error}
        </span>
      )}
    </fieldset>
  );
}
