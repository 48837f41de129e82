import type { SamplePages } from "../lib/samplePages";

/**
 * "Show older rounds" under a run's sample previews while older rounds are left to load (lib/samplePages.ts), with why the last load failed.
 * `since`: the rounds shown that came after the first page was listed (the Live screen's event stream), which its `total` does not count:
 * a live run's table read "The newest 32 of 30 rounds" (RELIABILITY 1544).
 */
export function OlderRounds({ pages, shown, since = 0 }: { pages: SamplePages; shown: number; since?: number }) {
  return (
    <>
      {pages.hasOlder && (
        <p className="small muted">
          The newest {shown} of {pages.total != null ? pages.total + since : shown} rounds.{" "}
          <button type="button" className="ghost small" disabled={pages.more.pending} onClick={() => void pages.more.run()}>
            Show older rounds
          </button>
        </p>
      )}
      {pages.error && (
        <p className="small error" role="alert">
          {pages.error}
        </p>
      )}
    </>
  );
}
