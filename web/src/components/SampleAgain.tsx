import { useState } from "react";
import { api } from "../api/endpoints";
import type { SampleImage } from "../api/types";
import { navigate } from "../lib/route";
import { againHref, againNote } from "../lib/sampleAgain";

/**
 * A preview's "Generate again": a link that opens Generate filled with what renders it again
 * (lib/sampleAgain), or, where Generate cannot (no file keeps the weights it shows, its prompt is
 * gone), why not instead; where Generate renders it only approximately (the listing's `note`),
 * the note beside the link. Nothing while the preview's listing entry is not known.
 */
export function SampleAgain({ runId, source, label }: { runId: string; source: SampleImage | undefined; label: string }) {
  if (!source) return null;
  const note = againNote(source);
  const why = cannot(source);
  if (why) {
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

/** Why Generate cannot render `source` again (null: it can, maybe only approximately: its note). */
function cannot(source: SampleImage): string | null {
  if (!source.lora) return source.note ?? "no LoRA file keeps the weights it shows";
  return source.prompt == null ? "the run's config no longer has its prompt" : null;
}

/**
 * "Generate again" of a preview whose listing entry is not at hand (the Live screen's latest
 * round, from the event stream, which asks the server for nothing): a button that asks for the
 * run's listing on the click, then opens Generate with it, or says why Generate cannot render it.
 */
export function SampleAgainOnClick({ runId, step, index, label }: { runId: string; step: number; index: number; label: string }) {
  const [why, setWhy] = useState<string | null>(null);
  const [asking, setAsking] = useState(false);
  const open = async () => {
    setAsking(true);
    try {
      const listed = await api.runSamples(runId, undefined, { step }); // its round only (the listing is paged)
      const source = listed.samples.find((s) => s.step === step && s.index === index);
      const reason = source ? cannot(source) : "the run lists no such preview (deleted since?)";
      if (reason) setWhy(reason);
      else navigate("again", runId, String(step), String(index));
    } catch (err) {
      setWhy(`cannot load the run's previews: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      setAsking(false);
    }
  };
  if (why) {
    return (
      <span className="small muted again-note" data-testid="again-note">
        Generate cannot render it again: {why}
      </span>
    );
  }
  return (
    <button type="button" className="ghost small" disabled={asking} aria-label={`Generate again: ${label}`} onClick={() => void open()}>
      Generate again
    </button>
  );
}
