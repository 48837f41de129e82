import { useState } from "react";
import { type ModelChoice, modelsFor } from "../lib/baseModels";
import { href } from "../lib/route";
import { Field } from "./Field";

const OTHER = "\u0000other";

interface Props {
  /** The form field name (the control that holds the value carries it). */
  name: string;
  models: readonly ModelChoice[];
  family: string;
  value: string;
  onChange: (value: string) => void;
  error?: string;
  /** Where local models live (shown when there are none). */
  modelsRoot?: string;
}

/**
 * Base model: a select of the local models for the family, plus "Hub id or another folder…",
 * which reveals a text field. Without local models it is the text field alone. Remount it (key)
 * when the family changes.
 */
export function BaseModelPicker({ name, models, family, value, onChange, error, modelsRoot }: Props) {
  const options = modelsFor(models, family);
  const local = options.find((m) => m.path === value);
  const [typing, setTyping] = useState(() => value !== "" && !local);
  const showInput = typing || options.length === 0 || !local;
  const hint = options.length
    ? local
      ? local.path
      : "a hub id (owner/name) or a pipeline folder"
    : `no local ${family} model${modelsRoot ? ` in ${modelsRoot}` : ""}: type a hub id (owner/name) or a folder`;

  return (
    <Field label="Base model" error={error} hint={hint} wide>
      <div className="model-picker">
        {options.length > 0 && (
          <select
            name={showInput ? `${name}_choice` : name}
            aria-label={showInput ? "base model source" : undefined}
            value={showInput ? OTHER : value}
            onChange={(e) => {
              if (e.target.value === OTHER) {
                setTyping(true);
                onChange("");
              } else {
                setTyping(false);
                onChange(e.target.value);
              }
            }}
          >
            {options.map((m) => (
              <option key={m.path} value={m.path} disabled={m.problem != null} title={m.problem ?? m.path}>
                {m.name}
                {m.problem ? ` (${m.problem})` : m.demo ? " (tiny demo)" : m.family == null ? " (unknown family)" : ""}
              </option>
            ))}
            <option value={OTHER}>Hub id or another folder…</option>
          </select>
        )}
        {showInput && (
          <input
            name={name}
            value={value}
            placeholder="black-forest-labs/FLUX.1-dev"
            autoComplete="off"
            spellCheck={false}
            onChange={(e) => onChange(e.target.value)}
          />
        )}
        {options.length === 0 && (
          <a className="small" href={href("models")}>
            Fetch or add a {family} model on the Models screen
          </a>
        )}
      </div>
    </Field>
  );
}
