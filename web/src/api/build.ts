import { useSyncExternalStore } from "react";

/**
 * This page's build of the web UI against the server's (RELIABILITY 2061). A tab keeps the bundle
 * it loaded; after an upgrade or a roll back its forms may lack settings the running studio has,
 * and "Train again" (the form filled from a run's config, keys it does not know skipped) started
 * the copy without them, with nothing said. The build stamps its id into the bundle
 * (`__LORASTUDIO_BUILD__`, web/vite.config.ts) and into the served `build-id.txt`, which the
 * server says on every /api answer (`X-Lorastudio-Build`, api/web_build.py): `client.request`
 * hands each answer's id to `heardServerBuild`; one that differs makes the page stale, and
 * then the App's banner asks for a reload and `refuseIfStale` keeps the page from starting a run
 * or a generation with its settings. The page also sends its id on each request, so the server
 * refuses such a start (409 PageOutdated) even before the page heard of the update. A page
 * without an id (the dev server, the tests) or a server without one (no built UI) never compares.
 */

declare const __LORASTUDIO_BUILD__: string | undefined;

/** The header each side names its build in. */
export const BUILD_HEADER = "X-Lorastudio-Build";

let own: string | null = typeof __LORASTUDIO_BUILD__ === "string" ? __LORASTUDIO_BUILD__ : null;
let served: string | null = null; // the newest build the server said, when it differs from ours
const listeners = new Set<() => void>();

/** This page's build id (null: a build without one, never compared). */
export function pageBuild(): string | null {
  return own;
}

/** Take the build id an answer of the server named (null: it named none, which changes nothing). */
export function heardServerBuild(id: string | null): void {
  if (!id || !own) return;
  const next = id === own ? null : id;
  if (next === served) return;
  served = next;
  for (const l of listeners) l();
}

/** Whether the server said it serves another build than this page's. */
export function isStale(): boolean {
  return served != null;
}

/** What a stale page says: the banner's words and the refusal's. */
export const STALE_MESSAGE = "The studio was updated: reload this page.";

/** A start refused by this page because it is stale: nothing was sent. */
export class StalePageError extends Error {
  constructor() {
    super(`${STALE_MESSAGE} This page's forms may lack settings the running version has, which would be left out; nothing was started.`);
    this.name = "StalePageError";
  }
}

/** Throw StalePageError while the page is stale (before a request that starts something with settings). */
export function refuseIfStale(): void {
  if (isStale()) throw new StalePageError();
}

/** Whether the page is stale, re-rendering on a change. */
export function useStale(): boolean {
  return useSyncExternalStore(
    (l) => {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    isStale,
    isStale,
  );
}

/** Tests: this page's build id, and nothing heard of the server's yet. */
export function setPageBuildForTests(id: string | null): void {
  own = id;
  served = null;
  for (const l of listeners) l();
}
