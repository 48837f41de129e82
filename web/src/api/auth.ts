/**
 * The API token (when the server sets LORASTUDIO_API_TOKEN): kept in localStorage, sent as
 * `Authorization: Bearer` by the fetch client and as `?token=` on URLs the browser loads by
 * itself (EventSource, <img>, download links), which cannot carry a header.
 *
 * A tiny external store: any 401 marks the token as needed, and the UI asks for it once.
 */
import { useSyncExternalStore } from "react";
import { served } from "./base";

const KEY = "lorastudio.token";

export interface AuthState {
  /** The saved token, or null. */
  token: string | null;
  /** A request was answered 401: the UI must ask for a (new) token. */
  needed: boolean;
  /** The 401 came while a token was saved (so that token is wrong). */
  refused: boolean;
}

function readStored(): string | null {
  try {
    return window.localStorage.getItem(KEY) || null;
  } catch {
    return null;
  }
}

let state: AuthState = { token: readStored(), needed: false, refused: false };
const listeners = new Set<() => void>();

function update(next: AuthState): void {
  state = next;
  for (const fn of listeners) fn();
}

export function getToken(): string | null {
  return state.token;
}

/** Save (or, with an empty string, forget) the token; clears the "needed" flag. */
export function setToken(token: string): void {
  const t = token.trim();
  try {
    if (t) window.localStorage.setItem(KEY, t);
    else window.localStorage.removeItem(KEY);
  } catch {
    // storage disabled (private mode): the token lives for this page only
  }
  update({ token: t || null, needed: false, refused: false });
}

/**
 * Called by the client on a 401 answer: the UI then asks for the token. `sentWith` is the token
 * the refused request carried (`getToken()` when it was sent): an answer to a request sent with
 * an older token (or none) says nothing about the token saved since, so it is ignored; otherwise
 * a slow request sent before the user saved the right token would ask again for it.
 */
export function reportUnauthorized(sentWith: string | null): void {
  if (sentWith !== state.token) return;
  if (state.needed) return;
  update({ ...state, needed: true, refused: state.token != null });
}

/** The Authorization header for the saved token ({} without one). */
export function authHeaders(): Record<string, string> {
  return state.token ? { Authorization: `Bearer ${state.token}` } : {};
}

/** `url` under the page's folder (api/base.ts: a proxy's sub-path), with `token=<token>` added to
 * its query (without a token, only the folder). */
export function withToken(path: string): string {
  const url = served(path);
  if (!state.token) return url;
  return `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(state.token)}`;
}

function subscribe(fn: () => void): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** The auth state; re-renders when the token is saved or a 401 arrives. */
export function useAuth(): AuthState {
  return useSyncExternalStore(subscribe, () => state);
}

/** Forget everything (tests): re-reads localStorage. */
export function resetAuthForTests(): void {
  update({ token: readStored(), needed: false, refused: false });
}
