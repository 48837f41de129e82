/**
 * Answers that arrive after the state they were asked for has changed must not update the UI as
 * if they were current. Three hooks, used by every screen that fetches or acts:
 *
 * - `useLatest()`: "latest request wins" for requests started by hand (a preflight, a preview, a
 *   poll): `begin()` aborts the previous request and returns a ticket whose `current()` says
 *   whether its answer may still be applied; `cancel()` drops the one in flight (the form changed).
 * - `useLoad(fetcher, key)`: data of one item (a run, a dataset, a family's LoRAs). The answer for
 *   key A is never returned once the key is B (not even for one render), A's request is aborted,
 *   and a `reload()` supersedes the one in flight. `refreshOn` re-fetches the same item, keeping
 *   what is shown until the new answer comes.
 * - `useAction(fn)`: one request per click: a second call while one is in flight is ignored
 *   (a double click, Enter then click), and `pending` disables the button meanwhile.
 * - `useUnmountSignal()`: a signal aborted when the component unmounts, for a request whose
 *   answer is for it alone: every request with an effect (a Start, a delete, a push ...: the
 *   endpoints' `answerTo`, client.AnswerTo) drops its answer, not the request, once it aborts, so
 *   an answer never lands on a screen gone (navigates, calls back, reloads).
 */
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { ApiError } from "../api/client";

/** A request started by `useLatest().begin()`. */
export interface Ticket {
  /** Aborted when a newer request begins, on cancel() and on unmount (pass it to fetch). */
  signal: AbortSignal;
  /** Whether this is still the latest request (its answer may be applied). */
  current: () => boolean;
}

/** Whether `err` is the AbortError of an aborted fetch (nothing to show: it was superseded). */
export function isAbort(err: unknown): boolean {
  return err instanceof DOMException && err.name === "AbortError";
}

/** "Latest request wins": see the module doc. The tickets of an unmounted component are never current. */
export function useLatest(): { begin: () => Ticket; cancel: () => void } {
  const last = useRef<AbortController | null>(null);
  const alive = useRef(true);
  useEffect(() => {
    alive.current = true; // StrictMode mounts twice
    return () => {
      alive.current = false;
      last.current?.abort();
    };
  }, []);
  const begin = useCallback((): Ticket => {
    last.current?.abort();
    const ctl = new AbortController();
    if (!alive.current) ctl.abort(); // begun by an answer that came after the unmount (a reload after an action): sent for nobody
    last.current = ctl;
    return { signal: ctl.signal, current: () => last.current === ctl && !ctl.signal.aborted };
  }, []);
  const cancel = useCallback(() => {
    last.current?.abort();
    last.current = null;
  }, []);
  return useMemo(() => ({ begin, cancel }), [begin, cancel]);
}

export interface Loaded<T> {
  /** The answer for the current key (null while it loads, or when it failed). */
  data: T | null;
  /** Why the current key's latest request failed (null otherwise; data of an earlier load stays). */
  error: unknown;
  /** No answer yet for the current key. */
  loading: boolean;
  /** Fetch the current key again (supersedes a request in flight); settles when its answer is applied or dropped. */
  reload: () => Promise<void>;
}

interface Held<T> {
  key: string;
  data: T | null;
  error: unknown;
  done: boolean;
}

/**
 * Load `fetcher(signal)` for `key` (any JSON-able value naming what is loaded; `fetcher` null:
 * nothing to load). `refreshOn`: values whose change re-fetches the same key without clearing it.
 * The fetcher is read at call time, so it may close over the render's values.
 */
export function useLoad<T>(
  fetcher: ((signal: AbortSignal) => Promise<T>) | null,
  key: unknown,
  refreshOn: readonly unknown[] = [],
): Loaded<T> {
  const k = JSON.stringify(key) ?? "";
  const [held, setHeld] = useState<Held<T>>({ key: k, data: null, error: null, done: false });
  const latest = useLatest();
  const fetcherRef = useRef(fetcher);
  fetcherRef.current = fetcher;
  const keyRef = useRef(k);
  keyRef.current = k;

  const reload = useCallback(async () => {
    const fn = fetcherRef.current;
    const at = keyRef.current;
    const ticket = latest.begin();
    if (!fn) return;
    try {
      const data = await fn(ticket.signal);
      if (ticket.current() && keyRef.current === at) setHeld({ key: at, data, error: null, done: true });
    } catch (err) {
      if (isAbort(err) || !ticket.current() || keyRef.current !== at) return;
      setHeld((h) => ({ key: at, data: h.key === at ? h.data : null, error: err, done: true }));
    }
  }, [latest]);

  const refresh = JSON.stringify(refreshOn);
  useEffect(() => {
    void reload();
    return latest.cancel;
  }, [k, refresh, reload, latest]);

  const mine = held.key === k;
  return {
    data: mine ? held.data : null,
    error: mine ? held.error : null,
    loading: fetcher != null && !(mine && held.done),
    reload,
  };
}

/** `() => signal`, the signal aborted when this component unmounts (read it at call time; under
 * StrictMode's second mount it is a fresh one). */
export function useUnmountSignal(): () => AbortSignal {
  const ctl = useRef(new AbortController());
  useEffect(() => {
    if (ctl.current.signal.aborted) ctl.current = new AbortController(); // StrictMode mounts twice
    const mine = ctl.current;
    return () => mine.abort();
  }, []);
  return useCallback(() => ctl.current.signal, []);
}

/**
 * `run(...args)` calls `fn` unless a call is still in flight (then it resolves at once, doing
 * nothing); `pending` is true meanwhile (disable the button with it). `fn` is read at call time.
 */
export function useAction<A extends unknown[]>(
  fn: (...args: A) => Promise<void>,
): { run: (...args: A) => Promise<void>; pending: boolean } {
  const inFlight = useRef(false);
  const [pending, setPending] = useState(false);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const alive = useRef(true);
  useEffect(() => {
    alive.current = true;
    return () => {
      alive.current = false;
    };
  }, []);
  const run = useCallback(async (...args: A) => {
    if (inFlight.current) return;
    inFlight.current = true;
    setPending(true);
    try {
      await fnRef.current(...args);
    } finally {
      inFlight.current = false;
      if (alive.current) setPending(false);
    }
  }, []);
  return { run, pending };
}

/** A message for a failed load: `gone` when the server answered 404 (the item was deleted, in
 * another tab or by the CLI), else the error's own message. */
export function loadMessage(err: unknown, gone: string): string {
  if (err instanceof ApiError && err.status === 404) return gone;
  return err instanceof Error ? err.message : String(err);
}
