import { type KeyboardEvent, useId, useRef } from "react";
import type { Family } from "../api/types";

interface Props {
  families: readonly Family[];
  value: string;
  onChange: (name: string) => void;
  /** The server's problem with the family (a 400's `family`), shown under the group and read with it. */
  error?: string;
}

const STEP: Record<string, number> = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };

/**
 * The model family as a segmented radio group: one Tab stop (the chosen family), arrow keys
 * move and choose, as a native radio group does. Its problem (`error`) is announced when it
 * appears (role=alert) and is the group's description while it stands (aria-invalid,
 * aria-describedby), so moving back to the group reads it again (RELIABILITY 2060).
 */
export function FamilyPicker({ families, value, onChange, error }: Props) {
  const group = useRef<HTMLDivElement | null>(null);
  const errorId = `${useId()}-error`;
  const onKey = (e: KeyboardEvent<HTMLDivElement>) => {
    const step = STEP[e.key];
    if (!step || !families.length) return;
    e.preventDefault();
    const at = Math.max(0, families.findIndex((f) => f.name === value));
    const next = families[(at + step + families.length) % families.length];
    onChange(next.name);
    group.current?.querySelector<HTMLElement>(`[data-family="${next.name}"]`)?.focus();
  };
  return (
    <>
      <div
        className="family-picker"
        role="radiogroup"
        aria-label="model family"
        aria-invalid={error ? true : undefined}
        aria-describedby={error ? errorId : undefined}
        ref={group}
        onKeyDown={onKey}
      >
        {families.map((f) => (
          <button
            type="button"
            key={f.name}
            role="radio"
            data-family={f.name}
            aria-checked={f.name === value}
            tabIndex={f.name === value ? 0 : -1}
            aria-describedby={error && f.name === value ? errorId : undefined} // the radio Tab lands on reads it too
            className={f.name === value ? "seg active" : "seg"}
            onClick={() => onChange(f.name)}
          >
            {f.title}
          </button>
        ))}
      </div>
      {error && (
        <span className="field-error" role="alert" id={errorId}>
          {error}
        </span>
      )}
    </>
  );
}
