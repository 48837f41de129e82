import { type KeyboardEvent, useRef } from "react";
import type { Family } from "../api/types";

interface Props {
  families: readonly Family[];
  value: string;
  onChange: (name: string) => void;
}

const STEP: Record<string, number> = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };

/**
 * The model family as a segmented radio group: one Tab stop (the chosen family), arrow keys
 * move and choose, as a native radio group does.
 */
export function FamilyPicker({ families, value, onChange }: Props) {
  const group = useRef<HTMLDivElement | null>(null);
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
    <div className="family-picker" role="radiogroup" aria-label="model family" ref={group} onKeyDown={onKey}>
      {families.map((f) => (
        <button
          type="button"
          key={f.name}
          role="radio"
          data-family={f.name}
          aria-checked={f.name === value}
          tabIndex={f.name === value ? 0 : -1}
          className={f.name === value ? "seg active" : "seg"}
          onClick={() => onChange(f.name)}
        >
          {f.title}
        </button>
      ))}
    </div>
  );
}
