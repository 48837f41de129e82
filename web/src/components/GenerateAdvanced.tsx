import { useEffect, useState } from "react";
import type { Family } from "../api/types";
import { Field } from "./Field";

/** Whether `family`'s generation takes a max_sequence_length (a T5 / LLM text encoder its pipeline cuts). */
export function takesTextTokens(family: Family | undefined): boolean {
  return family?.supports.includes("max_sequence_length") ?? false;
}

/**
 * The Generate form's advanced settings: the text tokens the prompt is read to (max_sequence_length;
 * blank: the pipeline's 512), for a family whose pipeline takes it. A run's previews read their prompt
 * at the run's length, so "Generate again" of one fills it in (and opens the section); nothing to show
 * for a family without it (SDXL's CLIP reads a fixed 77).
 */
export function GenerateAdvanced({
  family,
  tokens,
  onTokens,
  errors,
}: {
  family: Family;
  tokens: string;
  onTokens: (v: string) => void;
  errors: Record<string, string>;
}) {
  // opened by the user, or by a value filled in (Generate again, Reuse) or refused; never closed under them
  const shown = tokens.trim() !== "" || errors.max_sequence_length != null;
  const [open, setOpen] = useState(shown);
  useEffect(() => {
    if (shown) setOpen(true);
  }, [shown]);
  if (!takesTextTokens(family)) return null;
  const most = family.max_sequence_length_max ?? 4096;
  return (
    <details
      className="advanced"
      data-testid="generate-advanced"
      open={open}
      onToggle={(e) => setOpen((e.currentTarget as HTMLDetailsElement).open)}
    >
      <summary>Advanced</summary>
      <Field
        label="Text tokens"
        error={errors.max_sequence_length}
        hint={`max_sequence_length, 1-${most}: the tokens the prompt is read to (blank: 512; a run's previews: the run's)`}
      >
        <input name="gen_max_sequence_length" inputMode="numeric" value={tokens} placeholder="512" onChange={(e) => onTokens(e.target.value)} />
      </Field>
    </details>
  );
}

/** The request field of GenerateAdvanced's value: blank (or a family without it) is the pipeline's default (null). */
export function textTokensBody(family: Family | undefined, tokens: string): { max_sequence_length: number | null } {
  const t = tokens.trim();
  return { max_sequence_length: takesTextTokens(family) && t !== "" ? Number(t) : null };
}
