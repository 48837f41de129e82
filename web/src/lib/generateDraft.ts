/** The Generate form's draft (lib/draft): what it keeps of the form across leaving the screen. */
import type { LoraPick } from "../components/LoraPicker";

/** What the Generate form keeps as its draft (lib/draft): everything typed or picked but the reference uploads. */
export interface GenerateDraft {
  family: string;
  baseModel: string;
  baseConfig: string;
  picks: LoraPick[];
  prompt: string;
  seed: string;
  steps: string;
  width: string;
  height: string;
  guidance: string;
  negative: string;
  /** max_sequence_length (blank: the pipeline's default) */
  tokens?: string;
}
export const GENERATE_DRAFT = "generate";
/** A draft's text field, or `fallback` when it has none (or not text). */
export const draftText = (draft: Partial<GenerateDraft> | null, key: keyof GenerateDraft, fallback: string): string => {
  const v = draft?.[key];
  return typeof v === "string" ? v : fallback;
};
