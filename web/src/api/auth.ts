/**
 * The API token (when the server sets LORASTUDIO_API_TOKEN): kept in localStorage and sent as
 * `Authorization: Bearer` by the fetch client. URLs the browser loads by itself (EventSource,
 * <img>, download links) cannot carry a header, and never carry the token either (a proxy's
 * access log, the history, a Referer would keep it): the UI opens a browser session with the
 * token (`POST /api/session`, server: api/sessions.py), whose HttpOnly cookie the browser sends
 * with those URLs (`browserUrl`: the path under the page's folder, nothing added). The session
 * is opened once the token is known (`ensureSession`), renewed every RENEW_EVERY_MS and when the
 * event stream or an image is refused (`renewSession`: a restart or a token change ended it);
 * each image is retried once after that (`installImageRetry`). A renewal the server refuses
 * (401) asks for the token.
 *
 * A tiny external store: any 401 marks the token as needed, and the UI asks for it once.
 */
import { useSyncExternalStore } from "react";
import { pageFolder, served } from "./base";

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

/** The auth state now (outside React: `useAuth`). */
export function authState(): AuthState {
  return state;
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

/** A URL the browser loads by itself (an image, the event stream, a download): `path` under the
 * page's folder (api/base.ts: a proxy's sub-path), never with the token (the session cookie
 * stands for it; module comment). */
export function browserUrl(path: string): string {
  return served(path);
}

/** Renew the session every this long while the page is open (the server ends one unused for 12 h
 * or 24 h old). */
export const RENEW_EVERY_MS = 60 * 60 * 1000;
/** A renewal asked within this long of the last one opened shares it (many images refused at once). */
const RENEW_SHARED_MS = 10 * 1000;

let session: { token: string; ready: Promise<boolean>; at: number } | null = null;

/**
 * Open a browser session for the saved token (POST /api/session with the bearer header; the
 * answer sets the cookie), unless one was opened (or is opening) for it. Resolves true once the
 * cookie is set, or without a token (nothing to open); false when it could not be opened (a 401
 * asks for the token; no answer).
 */
export function ensureSession(): Promise<boolean> {
  const token = state.token;
  if (!token) return Promise.resolve(true);
  if (session && session.token === token) return session.ready;
  return openSession(token);
}

/** Open a new session (the last one was refused: a restart, a token change on the server), unless
 * one was opened for this token in the last few seconds (then that one). */
export function renewSession(): Promise<boolean> {
  const token = state.token;
  if (!token) return Promise.resolve(true);
  if (session && session.token === token && Date.now() - session.at < RENEW_SHARED_MS) return session.ready;
  return openSession(token);
}

function openSession(token: string): Promise<boolean> {
  const ready = (async () => {
    try {
      // the cookie's Path: this page's folder (behind a proxy that strips its prefix, the server
      // cannot see it), so the browser sends it to the studio only, not to the proxy's other apps
      const res = await fetch(served(`/api/session?path=${encodeURIComponent(pageFolder())}`), {
        method: "POST",
        headers: { Accept: "application/json", Authorization: `Bearer ${token}` },
        credentials: "same-origin",
      });
      if (res.status === 401) reportUnauthorized(token);
      return res.ok;
    } catch {
      return false; // no answer: the fetch client's requests say so
    }
  })();
  session = { token, ready, at: Date.now() };
  return ready;
}

/**
 * Retry, once each, an <img> of this page's origin that failed to load while a token is saved:
 * the session may be over (a server restart); it is renewed, then the image asked again. Returns
 * the function that removes the listener.
 */
export function installImageRetry(doc: Document = document): () => void {
  const retried = new WeakSet<HTMLImageElement>();
  const onError = (ev: Event) => {
    const img = ev.target;
    if (!(img instanceof HTMLImageElement) || retried.has(img) || !state.token) return;
    const src = img.getAttribute("src") ?? "";
    let url: URL;
    try {
      url = new URL(src, doc.baseURI);
    } catch {
      return;
    }
    if (url.origin !== new URL(doc.baseURI).origin) return;
    retried.add(img);
    void renewSession().then((ok) => {
      if (ok && img.getAttribute("src") === src) img.setAttribute("src", src);
    });
  };
  doc.addEventListener("error", onError, true); // an image's error does not bubble: captured
  return () => doc.removeEventListener("error", onError, true);
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
  session = null;
  update({ token: readStored(), needed: false, refused: false });
}
