import { useMemo, useState } from "react";
import { api } from "../api/endpoints";
import type { SampleImage, SampleList } from "../api/types";
import { isAbort, useAction, useLatest, useLoad } from "./latest";

const NONE: SampleList = { samples: [], total: 0, next_cursor: null }; // a failed first load (a run without a folder: 404)

/** The pages loaded below the first: their previews, the cursor of the page after them (null: none), and the run they are of. */
interface Older {
  runId: string;
  samples: SampleImage[];
  cursor: string | null;
}

/** What `useSamplePages` gives: the previews loaded (undefined until the first page came), oldest step first. */
export interface SamplePages {
  samples: SampleImage[] | undefined;
  /** the run's rounds, every page's (null until known) */
  total: number | null;
  /** whether older rounds are left to load */
  hasOlder: boolean;
  /** loads the page of rounds before those shown */
  more: { run: () => Promise<void>; pending: boolean };
  /** why the last "older" load failed (null: it did not) */
  error: string | null;
}

/**
 * A run's sample previews a page of rounds at a time (GET /api/runs/{id}/samples: the newest
 * `limit` rounds, the server's 100 where undefined; RELIABILITY 1341: a long run's 400 rounds were
 * one 553 KB answer). `more.run()` adds the page of older rounds; a failed first load gives [].
 * Keyed by the run: an answer for another run never shows.
 */
export function useSamplePages(runId: string, limit?: number): SamplePages {
  const page = useLoad((signal) => api.runSamples(runId, signal, limit != null ? { limit } : {}).catch(() => NONE), runId).data;
  const [older, setOlder] = useState<Older | null>(null);
  const [failed, setError] = useState<{ runId: string; text: string } | null>(null);
  const error = failed?.runId === runId ? failed.text : null; // another run's failed load is not this one's (RELIABILITY 1544)
  const loads = useLatest(); // a page of another run's in flight is dropped
  const olderOfRun = older?.runId === runId ? older : null;
  const cursor = olderOfRun ? olderOfRun.cursor : (page?.next_cursor ?? null);
  const more = useAction(async () => {
    if (!cursor) return;
    const ticket = loads.begin();
    try {
      const next = await api.runSamples(runId, ticket.signal, limit != null ? { limit, cursor } : { cursor });
      if (!ticket.current()) return;
      setError(null);
      setOlder({ runId, samples: [...next.samples, ...(olderOfRun?.samples ?? [])], cursor: next.next_cursor ?? null });
    } catch (err) {
      if (!isAbort(err) && ticket.current()) setError({ runId, text: `Cannot load older rounds: ${err instanceof Error ? err.message : String(err)}` });
    }
  });
  // one array per answer (the tables memoize on it: RELIABILITY 1293)
  const samples = useMemo(() => (page ? [...(olderOfRun?.samples ?? []), ...page.samples] : undefined), [page, olderOfRun]);
  return { samples, total: page?.total ?? null, hasOlder: cursor != null, more, error };
}
