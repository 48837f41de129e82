import type { SamplePages } from "../lib/samplePages";

/** "Show older rounds" under a run's sample previews while older rounds are left to load (lib/samplePages.ts), with why the last load failed. */
export function OlderRounds({ pages, shown }: { pages: SamplePages; shown: number }) {
  return (
    <>
      {pages.hasOlder && (
        <p className="small muted">
          The newest {shown} of {pages.total ?? shown} rounds.{" "}
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
