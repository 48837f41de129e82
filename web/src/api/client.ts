/**
 * The HTTP client of the UI: thin fetch wrappers that turn the server's error bodies into
 * ApiError (with the per-field problems of a 400), so screens can show each problem next to
 * the field it concerns. Sends the saved API token and reports a 401 to the auth store (the UI
 * then asks for the token).
 */
import { authHeaders, getToken, reportUnauthorized } from "./auth";
import { served } from "./base";
import { BUILD_HEADER, heardServerBuild, pageBuild } from "./build";
import type { ProblemOut } from "./types";

/** One problem with one field, as the server's 400 body lists them (ErrorOut.problems). */
export type FieldProblem = ProblemOut;

/** A non-2xx answer: `status`, a readable `message`, and the field problems when there are any. */
export class ApiError extends Error {
  readonly status: number;
  readonly problems: FieldProblem[];
  readonly body: unknown;

  constructor(status: number, message: string, problems: FieldProblem[], body: unknown) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.problems = problems;
    this.body = body;
  }

  /** Problems keyed by field name (several of one field joined with "; "; the config prefix is dropped). */
  byField(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const p of this.problems) {
      const key = p.field.replace(/^(body\.)?(config\.)?/, "");
      out[key] = out[key] ? `${out[key]}; ${p.message}` : p.message;
    }
    return out;
  }
}

function asProblems(raw: unknown): FieldProblem[] {
  if (!Array.isArray(raw)) return [];
  return raw.map((p) => {
    if (typeof p === "string") return { field: "", message: p };
    if (p && typeof p === "object") {
      const o = p as Record<string, unknown>;
      // FastAPI's 422 items are {loc: [...], msg}; ours are {field, message}.
      if (Array.isArray(o.loc)) return { field: o.loc.slice(1).join("."), message: String(o.msg ?? "") };
      return { field: String(o.field ?? ""), message: String(o.message ?? o.msg ?? "") };
    }
    return { field: "", message: String(p) };
  });
}

/** Build an ApiError from a failed response (reads its JSON body when there is one). */
export async function errorFrom(res: Response): Promise<ApiError> {
  let body: unknown = null;
  const text = await res.text();
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  let message = `${res.status} ${res.statusText}`.trim();
  let problems: FieldProblem[] = [];
  if (body && typeof body === "object") {
    const o = body as Record<string, unknown>;
    if (typeof o.detail === "string") message = o.detail;
    problems = asProblems(o.problems ?? (Array.isArray(o.detail) ? o.detail : undefined));
    if (problems.length && typeof o.detail !== "string") message = problems.map((p) => p.message).join("; ");
  } else if (typeof body === "string" && body) {
    message = isHtml(res, body) ? foreignAnswer(res.status, res.statusText, body) : body;
  }
  return new ApiError(res.status, message, problems, body);
}

function isHtml(res: Response, text: string): boolean {
  return (res.headers.get("content-type") ?? "").includes("text/html") || /^\s*<(!doctype|html)/i.test(text);
}

/**
 * The words of an answer that is not the studio's (which answers JSON): an HTML page of a reverse
 * proxy or gateway in front of it (nginx's 413 for an upload past its client_max_body_size, its
 * 502 / 504 while the server is down). Its title and what it means, never the page's markup.
 */
export function foreignAnswer(status: number, statusText: string, html: string): string {
  const title = /<title>([^<]*)<\/title>/i.exec(html)?.[1]?.trim() || `${status} ${statusText}`.trim();
  let why = "";
  if (status === 413) {
    why = ": the request is larger than that proxy accepts (nginx: client_max_body_size; see README, Behind a reverse proxy)";
  } else if (status === 504) {
    // the proxy's read timeout (nginx: 60 s) cut a long request: the studio takes that for the
    // client leaving, and a generation stops with nothing kept
    why =
      ": it stopped waiting for the studio's answer (nginx: proxy_read_timeout, 60 s by default); a generation cut so is cancelled: raise that timeout (see README, Behind a reverse proxy)";
  } else if (status === 502 || status === 503) {
    why = ": it got no answer from the studio (is `lorastudio serve` running?)";
  }
  return `${title}, answered by a proxy or gateway in front of the studio, not by lorastudio${why}`;
}

/** The message of a request the server never answered (down, restarting, the network cut); `why`: the browser's words. */
export function noAnswer(why: string): string {
  return `no answer from the server (is \`lorastudio serve\` running, and the network up?): ${why}`;
}

/** This page's build id for the server (api/build.ts): a start from a page of another build is its 409. */
function buildHeaders(): Record<string, string> {
  const own = pageBuild();
  return own ? { [BUILD_HEADER]: own } : {};
}

/** fetch + JSON decode; throws ApiError on a non-2xx answer, and ApiError status 0 when no answer came. */
export async function request<T>(method: string, url: string, body?: unknown, init?: RequestInit): Promise<T> {
  const sentWith = getToken();
  const headers: Record<string, string> = { Accept: "application/json", ...authHeaders(), ...buildHeaders() };
  let payload: BodyInit | undefined;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  let res: Response;
  try {
    res = await fetch(served(url), { method, headers, body: payload, ...init });
  } catch (err) {
    if (err instanceof DOMException && err.name === "AbortError") throw err;
    throw new ApiError(0, noAnswer(err instanceof Error ? err.message : String(err)), [], null);
  }
  heardServerBuild(res.headers.get(BUILD_HEADER)); // another build: this page asks to be reloaded (api/build.ts)
  if (res.status === 401) reportUnauthorized(sentWith);
  if (!res.ok) throw await errorFrom(res);
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  return (text ? JSON.parse(text) : undefined) as T;
}

/** `signal`: aborts the request (it then rejects with the fetch's AbortError; see lib/latest.ts). */
export const get = <T>(url: string, signal?: AbortSignal) => request<T>("GET", url, undefined, signal && { signal });
export const post = <T>(url: string, body?: unknown, signal?: AbortSignal) => request<T>("POST", url, body, signal && { signal });
/**
 * Whom a mutation's answer is for (every POST, PUT and DELETE with an effect takes one): the
 * signal of the screen that sent it (lib/latest.useUnmountSignal, aborted when it unmounts), or
 * null for a flight kept outside every screen whose answer is for whichever screen is open then
 * (lib/generationInFlight, lib/uploadsInFlight, lib/stepGridInFlight). Once the signal aborts, the
 * answer is dropped unread (the promise rejects with an AbortError: `unheeded`), but the request
 * is never aborted: a Start, a delete or a push sent stands. (Aborting the fetch could cancel it
 * before the server read it.)
 */
export type AnswerTo = AbortSignal | null;

/** A request whose effect on the server must stand, its answer for `answerTo` (see AnswerTo). */
export const effect = <T>(method: "POST" | "PUT" | "DELETE", url: string, body: unknown, answerTo: AnswerTo) =>
  unheeded(request<T>(method, url, body), answerTo ?? undefined);
/** POST with an effect (a Start, a Stop, a Resume ...): see AnswerTo. */
export const postEffect = <T>(url: string, body: unknown, answerTo: AnswerTo) => effect<T>("POST", url, body, answerTo);
export const putEffect = <T>(url: string, body: unknown, answerTo: AnswerTo) => effect<T>("PUT", url, body, answerTo);
export const delEffect = <T>(url: string, answerTo: AnswerTo) => effect<T>("DELETE", url, undefined, answerTo);

/** `answer`, or an AbortError once `signal` aborts (the answer is then dropped unread). */
export function unheeded<T>(answer: Promise<T>, signal?: AbortSignal): Promise<T> {
  if (!signal) return answer;
  answer.catch(() => undefined); // dropped: its refusal is nobody's unhandled rejection
  return new Promise<T>((resolve, reject) => {
    const drop = () => reject(new DOMException("the answer is no longer awaited", "AbortError"));
    if (signal.aborted) return drop();
    signal.addEventListener("abort", drop, { once: true });
    answer.then(
      (v) => {
        signal.removeEventListener("abort", drop);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", drop);
        reject(e);
      },
    );
  });
}

/** Encode one path segment (dataset, file or run name). */
export const seg = (s: string) => encodeURIComponent(s);

/** Encode a dataset image's listed name for its routes: a kohya layout read in place lists its
 * images as `<folder>/<name>` (`10_sks/a.png`), whose "/" stays one (the server refuses an encoded
 * separator in a segment); each part is encoded as `seg` does. */
export const fileSegs = (s: string) => s.split("/").map(seg).join("/");

/**
 * POST a multipart form with upload progress (XMLHttpRequest: fetch has no upload progress).
 * `onProgress(sentBytes, totalBytes)`; resolves with the JSON answer, rejects with ApiError; its
 * answer (and its progress) for `answerTo` (see AnswerTo).
 */
export function postWithProgress<T>(
  url: string,
  form: FormData,
  onProgress: (sent: number, total: number) => void,
  answerTo: AnswerTo,
): Promise<T> {
  const heard = (sent: number, total: number) => {
    if (!answerTo?.aborted) onProgress(sent, total);
  };
  return unheeded(sendWithProgress<T>(url, form, heard), answerTo ?? undefined);
}

function sendWithProgress<T>(url: string, form: FormData, onProgress: (sent: number, total: number) => void): Promise<T> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", served(url));
    xhr.setRequestHeader("Accept", "application/json");
    const sentWith = getToken();
    for (const [k, v] of Object.entries({ ...authHeaders(), ...buildHeaders() })) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.total);
    xhr.onerror = () => reject(new ApiError(0, noAnswer("network error during the upload"), [], null));
    xhr.onload = () => {
      heardServerBuild(xhr.getResponseHeader(BUILD_HEADER));
      if (xhr.status === 401) reportUnauthorized(sentWith);
      const res = new Response(xhr.responseText || null, { status: xhr.status, statusText: xhr.statusText });
      if (xhr.status >= 200 && xhr.status < 300) {
        resolve((xhr.responseText ? JSON.parse(xhr.responseText) : undefined) as T);
      } else {
        errorFrom(res).then(reject, reject);
      }
    };
    xhr.send(form);
  });
}
