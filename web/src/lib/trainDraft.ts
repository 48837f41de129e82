import type { Family } from "../api/types";
import { FIELD_KINDS, type FormValues, initialValues } from "./trainForm";

/** The Train form's draft key (lib/draft.ts keeps it per tab). */
export const TRAIN_DRAFT = "train";

/** A saved Train draft as form values: over its family's initial values, only the keys a form of
 * this version has (null: no draft, or one of a family this server no longer has). */
export function restoreDraft(draft: Partial<FormValues> | null, families: readonly Family[]): FormValues | null {
  const fam = families.find((f) => f.name === draft?.family);
  if (!draft || !fam) return null;
  const base = initialValues(fam);
  const known = Object.entries(draft).filter(
    ([k, v]) => (k in FIELD_KINDS || k in base) && (typeof v === "string" || typeof v === "boolean"),
  );
  return { ...base, ...Object.fromEntries(known), family: fam.name, unit: draft.unit === "epochs" ? "epochs" : "steps" };
}
