import { type SamplePreset, type SampleRef } from "../lib/sampleAgain";
import { href } from "../lib/route";

/**
 * The Generate screen's word on the preview it was opened for ("Generate again"): whose settings
 * the form holds and whether Generate renders that preview's pixels (the listing's note), or why
 * the form could not take them; and, where the tab had a draft, that it is kept.
 */
export function SampleFrom({ from, preset, draftKept }: { from: SampleRef; preset: SamplePreset; draftKept: boolean }) {
  const run = <a href={href("runs", from.runId)}>{preset.runName ?? from.runId}</a>;
  const which = `the step ${from.step} preview of prompt ${from.index + 1} of run`;
  if (!preset.settings) {
    return (
      <div className="banner warn" data-testid="again-note">
        Generate cannot render {which} {run} again: {preset.why}
      </div>
    );
  }
  return (
    <div className={`banner ${preset.note ? "warn" : "info"}`} data-testid="again-from">
      Settings of {which} {run}
      {preset.note ? (
        <>: Generate will not render the same pixels: {preset.note}.</>
      ) : (
        <>: Generate renders it again.</>
      )}
      {draftKept && " The form you had here is kept: the Generate tab opens it until you edit this one."}
    </div>
  );
}
