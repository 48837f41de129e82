import type { SampleImage } from "../api/types";
import { againHref } from "../lib/sampleAgain";

/**
 * A preview's "Generate again": a link that opens Generate filled with what renders it again
 * (lib/sampleAgain), or, where Generate cannot (no file keeps the weights it shows, its prompt is
 * gone), why not instead; where Generate renders it only approximately (the listing's `note`),
 * the note beside the link. Nothing while the preview's listing entry is not known.
 */
export function SampleAgain({ runId, source, label }: { runId: string; source: SampleImage | undefined; label: string }) {
  if (!source) return null;
  const note = source.note ?? null;
  if (!source.lora || source.prompt == null) {
    const why = !source.lora ? (note ?? "no LoRA file keeps the weights it shows") : "the run's config no longer has its prompt";
    return (
      <span className="small muted again-note" data-testid="again-note">
        Generate cannot render it again: {why}
      </span>
    );
  }
  return (
    <span className="again">
      <a href={againHref(runId, source.step, source.index)} aria-label={`Generate again: ${label}`}>
        Generate again
      </a>
      {note && (
        <span className="small muted again-note" data-testid="again-note">
          {" "}
          (not the same pixels: {note})
        </span>
      )}
    </span>
  );
}
