import { useEffect, useId, useRef, useState } from "react";
import type { SamplePages } from "../lib/samplePages";

/**
 * "Show older rounds" under a run's sample previews while older rounds are left to load (lib/samplePages.ts), with why the last load failed.
 * `since`: the rounds shown that came after the first page was listed (the Live screen's event stream), which its `total` does not count:
 * a live run's table read "The newest 32 of 30 rounds" (RELIABILITY 1544). Once the oldest page came, the button is gone and the focus
 * goes to the line saying every round is shown: it fell to the page's start, a keyboard user's place lost (RELIABILITY 1549).
 * Keyed by the run where a screen shows several runs in turn.
 */
export function OlderRounds({ pages, shown, since = 0 }: { pages: SamplePages; shown: number; since?: number }) {
  const [asked, setAsked] = useState(false); // an older page was asked for here
  const all = useRef<HTMLParagraphElement | null>(null);
  const errorId = `${useId()}-error`; // why the last load failed: the button's description (RELIABILITY 2060)
  useEffect(() => {
    if (asked && !pages.hasOlder) all.current?.focus();
  }, [asked, pages.hasOlder]);
  return (
    <>
      {pages.hasOlder && (
        <p className="small muted">
          The newest {shown} of {pages.total != null ? pages.total + since : shown} rounds.{" "}
          <button
            type="button"
            className="ghost small"
            disabled={pages.more.pending}
            aria-describedby={pages.error ? errorId : undefined}
            onClick={() => {
              setAsked(true);
              void pages.more.run();
            }}
          >
            Show older rounds
          </button>
        </p>
      )}
      {asked && !pages.hasOlder && (
        <p className="small muted" tabIndex={-1} ref={all}>
          All {shown} rounds shown.
        </p>
      )}
      {pages.error && (
        <p className="small error" role="alert" id={errorId}>
          {pages.error}
        </p>
      )}
    </>
  );
}
