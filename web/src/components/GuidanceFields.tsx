import type { Family } from "../api/types";
import { Field } from "./Field";

/** The guidance scale's label for how a family guides (FamilyOut.guidance). */
export function guidanceLabel(family: Family): string {
  if (family.guidance === "true_cfg") return "True CFG scale";
  if (family.guidance === "embedded") return "Guidance (distilled)";
  return "CFG scale";
}

/**
 * Guidance and negative prompt as the family's pipeline takes them: a guidance scale (blank: the family's
 * default, shown as the placeholder) and, only where the family takes one, a negative prompt.
 */
export function GuidanceFields({
  family,
  guidance,
  negative,
  onGuidance,
  onNegative,
  errors,
}: {
  family: Family;
  guidance: string;
  negative: string;
  onGuidance: (v: string) => void;
  onNegative: (v: string) => void;
  errors: Record<string, string>;
}) {
  const hint =
    family.guidance === "embedded"
      ? `${family.title} is guidance-distilled: one pass, no negative prompt`
      : family.guidance === "true_cfg"
        ? "applied only with a negative prompt (a space for nothing in particular)"
        : "higher follows the prompt more closely";
  return (
    <>
      <Field label={guidanceLabel(family)} error={errors.guidance} hint={hint}>
        <input
          name="gen_guidance"
          inputMode="decimal"
          value={guidance}
          placeholder={family.guidance_default != null ? String(family.guidance_default) : "default"}
          onChange={(e) => onGuidance(e.target.value)}
        />
      </Field>
      {family.negative_prompt && (
        <Field label="Negative prompt" error={errors.negative_prompt} hint="what to steer away from" wide>
          <textarea name="negative_prompt" rows={2} value={negative} onChange={(e) => onNegative(e.target.value)} />
        </Field>
      )}
    </>
  );
}

/**
 * The request fields of GuidanceFields' values: a blank guidance is the family's default (null); a negative prompt
 * only where taken, and only spaces as none, except for a true-CFG family (Qwen-Image), whose pipeline guides only
 * with a negative prompt: there " " is the one its model card guides with (RELIABILITY 1560).
 */
export function guidanceBody(family: Family | undefined, guidance: string, negative: string): { guidance: number | null; negative_prompt: string | null } {
  const g = guidance.trim();
  const given = family?.guidance === "true_cfg" ? negative !== "" : negative.trim() !== "";
  return {
    guidance: g === "" ? null : Number(g),
    negative_prompt: family?.negative_prompt && given ? negative : null,
  };
}
