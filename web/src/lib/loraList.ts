import { useRef, useState } from "react";
import { api } from "../api/endpoints";
import type { Lora, LoraList } from "../api/types";
import type { LoraPick } from "../components/LoraPicker";
import { isAbort, useAction, useLatest, useLoad } from "./latest";

/** The pages below the first: their LoRAs and the cursor of the page after them (null: none). */
interface Older {
  at: string; // the family and search they belong to
  loras: Lora[];
  cursor: string | null;
}

/** What the Generate page's LoRA picker shows (RELIABILITY 1280: GET /api/loras pages). */
export interface LoraListView {
  /** The pages shown (newest first), then the picked LoRAs that are not among them. */
  loras: Lora[];
  /** Whether `loras` is the server's answer for the family, the search and every pick: until
   * then no pick is called missing. */
  loaded: boolean;
  error: unknown;
  /** The LoRAs of the family the search keeps, every page's (null until the first answer). */
  total: number | null;
  /** How many of them the pages shown hold. */
  shown: number;
  /** Whether there is more than one page to choose from (or a search is set): the picker offers its search. */
  searchable: boolean;
  query: string;
  setQuery: (q: string) => void;
  /** Adds the next page (null: none). */
  more: (() => void) | null;
  morePending: boolean;
  moreError: string | null;
}

/**
 * The family's LoRAs a page at a time, searched by name on the server (GET /api/loras' `q`,
 * `cursor`): "Show more" adds the next page. A pick of a LoRA on no page shown (on a later page,
 * or outside the search: a kept draft's, a reused image's) is asked for by name (`name`), so it
 * stays listed and ticked, and is called missing only when the server has no such LoRA.
 */
export function useLoraList(family: string | null, picks: readonly LoraPick[]): LoraListView {
  const [query, setQuery] = useState("");
  const at = JSON.stringify([family, query]);
  const [older, setOlder] = useState<Older | null>(null);
  const [moreError, setMoreError] = useState<string | null>(null);
  const moreLoads = useLatest(); // a "Show more" in flight is dropped when the search changes
  // keyed by the family and the search: a slow answer for the ones before never lists its LoRAs under these
  const first = useLoad(
    family
      ? (signal) => {
          moreLoads.cancel();
          return api.loras(family, signal, query ? { q: query } : {});
        }
      : null,
    [family, query],
  );
  // while a new search loads, the family's last answer stays shown (no "no LoRA yet" per keystroke)
  const last = useRef<{ family: string | null; data: LoraList } | null>(null);
  if (first.data) last.current = { family, data: first.data };
  const firstPage = first.data ?? (last.current?.family === family ? last.current.data : null);
  const extra = older?.at === at ? older : null;
  const paged = firstPage ? [...firstPage.loras, ...(extra?.loras ?? [])] : [];
  const cursor = first.data ? (extra ? extra.cursor : (first.data.next_cursor ?? null)) : null;
  const partial = cursor != null || query !== "";
  const absent = partial ? [...new Set(picks.map((p) => p.name))].filter((n) => !paged.some((l) => l.name === n)).sort() : [];
  const picked = useLoad(
    family && first.data && absent.length ? (signal) => api.loras(family, signal, { names: absent }) : null,
    [family, absent],
  );
  const loras = [...paged, ...(picked.data?.loras ?? []).filter((l) => !paged.some((p) => p.name === l.name))];
  const more = useAction(async () => {
    if (!family || !cursor) return;
    const ticket = moreLoads.begin();
    try {
      const page = await api.loras(family, ticket.signal, { ...(query ? { q: query } : {}), cursor });
      if (!ticket.current()) return;
      const names = new Set(paged.map((l) => l.name));
      setOlder({ at, loras: [...(extra?.loras ?? []), ...page.loras.filter((l) => !names.has(l.name))], cursor: page.next_cursor ?? null });
      setMoreError(null);
    } catch (err) {
      if (!isAbort(err) && ticket.current()) setMoreError(`Cannot load more LoRAs: ${err instanceof Error ? err.message : String(err)}`);
    }
  });
  return {
    loras,
    loaded: first.data != null && (absent.length === 0 || picked.data != null),
    error: first.error,
    total: firstPage?.total ?? null,
    shown: paged.length,
    searchable: query !== "" || (firstPage != null && (firstPage.total ?? firstPage.loras.length) > firstPage.loras.length),
    query,
    setQuery: (q: string) => {
      setQuery(q);
      setMoreError(null);
    },
    more: cursor ? () => void more.run() : null,
    morePending: more.pending,
    moreError,
  };
}
