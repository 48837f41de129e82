/**
 * Live training state shared by every screen: the status snapshot, fetched once, then kept
 * current from the server-sent event stream. A progress event appends one chart point and
 * replaces the progress read-out, a load/preparing event replaces the phase, a sample_ready event
 * replaces the latest sample previews, a plan_chosen event sets the job's plan, a validation event
 * adds a point to the job's validation series (no re-fetch); the
 * rare others (status changes, complete, error, a warning, a new job) re-fetch the small status snapshot
 * with `?since=<last step>` so only new metric points and validation rounds travel (the earlier
 * rounds kept). Reconnects when the API token
 * changes (the stream is opened once the browser session of that token is: its cookie stands
 * for the token, auth.ts), and when the server closed the stream for good (an error status while
 * it restarted, the session over: renewed first): one stream at a time, and an event of a stream closed
 * since is never applied. Overlapping status re-fetches: an answer older than one applied is dropped.
 * A snapshot never shows an older state than the events already applied (lib/eventOrder.ts): the
 * events after its `event_seq` are folded onto it again.
 */
import { createContext, type ReactNode, useCallback, useContext, useEffect, useRef, useState } from "react";
import { ensureSession, renewSession, useAuth } from "./auth";
import { api } from "./endpoints";
import type { Job, PlanChosenEvent, ProgressEvent, SampleReadyEvent, TrainEvent, TrainStatus, ValidationEvent } from "./types";
import { planFromEvent } from "../lib/plan";
import { appendPoint, emptySeries, fromPoints, type MetricSeries, withValidation } from "../lib/series";
import { eventId, Replay } from "../lib/eventOrder";

export const EVENT_TYPES = [
  "model_load_started",
  "model_load_completed",
  "preparing",
  "progress",
  "sample_ready",
  "plan_chosen",
  "validation",
  "complete",
  "warning",
  "dataset_warnings",
  "error",
  "status",
  "busy",
] as const;

/** EventSource.CLOSED (a literal: test doubles of EventSource have no constants). */
const CLOSED = 2;
/** How long after a stream closed for good (refused: 429 / 503 past the server's stream caps, a
 * restart's 502, a 401) a fresh one is opened; twice as long after each one that failed again, up to
 * REOPEN_MAX_MS, and REOPEN_MS again once one opened (RELIABILITY 1770: it was 3 s every time). */
export const REOPEN_MS = 3000;
export const REOPEN_MAX_MS = 60_000;

export interface TrainingState {
  status: TrainStatus | null;
  job: Job | null;
  series: MetricSeries;
  connected: boolean;
  /** Seconds until a stream closed for good is opened again (null: none waits). */
  retryInS: number | null;
  /** Why the latest status snapshot could not be fetched (null: the latest answered). */
  error: string | null;
  /** Re-fetch the status snapshot (after start/stop). */
  refresh: () => Promise<void>;
}

const Ctx = createContext<TrainingState | null>(null);

export function useTraining(): TrainingState {
  const v = useContext(Ctx);
  if (!v) throw new Error("useTraining outside <TrainingProvider>");
  return v;
}

/** Fold one progress event into a job snapshot. */
function withProgress(job: Job, p: ProgressEvent): Job {
  return {
    ...job,
    status: job.status === "preparing" || job.status === "queued" ? "running" : job.status,
    progress: p,
    steps_run: Math.max(job.steps_run, p.step),
  };
}

/** Fold one sample_ready event into a job snapshot: its latest sample previews. */
export function withSamples(job: Job, ev: SampleReadyEvent): Job {
  return { ...job, samples: { step: ev.step, images: ev.images } };
}

/** Fold one plan_chosen event into a job snapshot: the plan the job runs with. */
export function withPlan(job: Job, ev: PlanChosenEvent): Job {
  return { ...job, plan: planFromEvent(ev) };
}

/** Fold one validation event into a job snapshot: its validation series gains the round. */
export function withRound(job: Job, ev: ValidationEvent): Job {
  return { ...job, validation: withValidation(job.validation ?? [], { step: ev.step, loss: ev.loss }) };
}

/**
 * `job` with event `ev` folded in (progress, samples, a validation round, the plan, the phase);
 * null when `ev` is of another job or of a kind a snapshot re-fetch brings (status changes, the
 * end, warnings, a new job).
 */
export function foldEvent(job: Job, ev: TrainEvent): Job | null {
  if (ev.job_id && ev.job_id !== job.id) return null;
  switch (ev.type) {
    case "progress":
      return withProgress(job, ev);
    case "sample_ready":
      return withSamples(job, ev);
    case "validation":
      return withRound(job, ev);
    case "plan_chosen":
      return withPlan(job, ev);
    case "preparing":
    case "model_load_started":
    case "model_load_completed":
      return { ...job, phase: ev, status: job.status === "queued" ? "preparing" : job.status };
    default:
      return null;
  }
}

/**
 * `job` as its stored record says now (GET /api/runs/<id>): after a server restart the status
 * snapshot has no job, and the run followed ended (interrupted) or finished meanwhile. The live
 * parts (progress, samples, plan) are kept; null when the record cannot be read.
 */
async function recordOf(job: Job): Promise<Job | null> {
  try {
    const run = await api.run(job.id);
    const lora = run.outputs.find((o) => o.kind === "lora")?.path ?? job.lora_path;
    return { ...job, status: run.status, error: run.error, finished_at: run.finished_at, steps_run: run.steps_run, lora_path: lora, busy: null, pid: null, metrics: [] };
  } catch {
    return null;
  }
}

export function TrainingProvider({ children }: { children: ReactNode }) {
  const [status, setStatus] = useState<TrainStatus | null>(null);
  const [job, setJob] = useState<Job | null>(null);
  const [series, setSeries] = useState<MetricSeries>(emptySeries);
  const [connected, setConnected] = useState(false);
  const [retryInS, setRetryInS] = useState<number | null>(null);
  const [error, setError] = useState<string | null>(null);
  const jobRef = useRef<Job | null>(null);
  const lastStep = useRef<number | null>(null);
  const { token } = useAuth();

  // refreshes overlap (an event burst, a reconnect, a Start): each is numbered, and an answer
  // older than one already applied is dropped (it would bring back a state that has passed)
  const asked = useRef(0);
  const applied = useRef(0);
  // the latest events applied, folded again onto a snapshot older than them
  const replay = useRef(new Replay());
  const refresh = useCallback(async () => {
    const mine = ++asked.current;
    const current = jobRef.current;
    const same = current != null;
    const asSince = same && lastStep.current != null ? lastStep.current : undefined;
    let s: TrainStatus;
    try {
      s = await api.status(asSince);
    } catch (err) {
      if (mine >= applied.current) setError(err instanceof Error ? err.message : String(err));
      throw err;
    }
    // a restarted server knows no job of its life: the one followed is shown as its record now says
    let next = s.job ?? (current ? await recordOf(current) : null);
    if (mine < applied.current) return; // a newer refresh was applied meanwhile: its state stands
    applied.current = mine;
    setError(null);
    // a snapshot asked with `since` has the validation rounds from that step on: the earlier ones
    // shown stay (a long run's poll no longer carries every round, RELIABILITY 1294)
    const shown = jobRef.current;
    if (s.job && next && shown && next.id === shown.id && asSince != null) {
      next = { ...next, validation: (next.validation ?? []).reduce(withValidation, shown.validation ?? []) };
    }
    // events applied after the snapshot was taken (it was answered after them): folded onto it
    // again, so it never shows an older step, loss, sample or phase than the screen already did
    const later: ProgressEvent[] = [];
    if (s.job) {
      for (const ev of replay.current.after(s.event_seq)) {
        const folded = next && foldEvent(next, ev);
        if (!folded) continue;
        next = folded;
        if (ev.type === "progress") later.push(ev);
      }
    }
    const base = jobRef.current;
    const points = [...(next?.metrics ?? []), ...later];
    if (next && base && next.id === base.id) {
      setSeries((prev) => points.reduce(appendPoint, prev));
    } else {
      setSeries(fromPoints(points));
    }
    const steps = points.map((m) => m.step);
    if (next && (!base || next.id !== base.id)) lastStep.current = steps.length ? Math.max(...steps) : null;
    else if (steps.length) lastStep.current = Math.max(lastStep.current ?? 0, ...steps);
    jobRef.current = next;
    setJob(next);
    setStatus({ ...s, job: next }); // its job as shown (the events after it folded on)
  }, []);

  useEffect(() => {
    refresh().catch(() => undefined);
    if (typeof EventSource === "undefined") return;
    let es: EventSource | null = null;
    let retry: number | undefined;
    let tick: number | undefined; // counts retryInS down each second while `retry` waits (RELIABILITY 1841)
    let failed = 0; // streams closed for good in a row (the next waits REOPEN_MS * 2^failed)
    let ended = false; // this effect was cleaned up: the token changed, or the provider unmounted
    // the stream carries no token: the browser session's cookie stands for it (auth.ts); a stream
    // closed for good renews the session first (a restart ended it; a 401 there asks for the token)
    const open = (renew = false) => {
      void (renew ? renewSession() : ensureSession()).then(() => {
        if (!ended) openStream();
      });
    };
    const openStream = () => {
      const source = new EventSource(api.eventsUrl());
      es = source;
      // an event of a stream closed or replaced since is never applied
      const mine = () => !ended && es === source;
      source.onopen = () => {
        if (!mine()) return;
        setConnected(true);
        failed = 0;
        window.clearInterval(tick);
        setRetryInS(null);
        // a fresh stream starts with the events after its request reached the server, and one
        // reconnected by the browser cannot replay across a server restart: the events before it
        // (after the last snapshot; a "complete" among them) come with a snapshot asked now
        refresh().catch(() => undefined);
      };
      source.onerror = () => {
        if (!mine()) return;
        setConnected(false);
        // the browser reconnects by itself, unless the server answered with an error status (a
        // proxy's 502 while the server restarts, a 401 for a token changed there): then the stream
        // is closed for good. One fresh stream is opened a little later, and the status is fetched
        // now (a 401 asks for the token; saving it reopens the stream through this effect).
        if (source.readyState === CLOSED) {
          source.close();
          es = null;
          const wait = Math.min(REOPEN_MS * 2 ** failed, REOPEN_MAX_MS);
          failed += 1;
          setRetryInS(wait / 1000);
          // the wait shown counts down (it said "in 60 s" for the whole minute)
          window.clearInterval(tick);
          tick = window.setInterval(() => setRetryInS((s) => (s != null && s > 1 ? s - 1 : s)), 1000);
          retry = window.setTimeout(() => {
            window.clearInterval(tick);
            setRetryInS(null);
            open(true);
          }, wait);
          refresh().catch(() => undefined);
        }
      };
      const onEvent = (msg: MessageEvent<string>) => {
        if (!mine()) return;
        handle(msg);
      };
      for (const t of EVENT_TYPES) source.addEventListener(t, onEvent as EventListener);
      source.onmessage = onEvent;
    };
    const handle = (msg: MessageEvent<string>) => {
      let ev: TrainEvent;
      try {
        ev = JSON.parse(msg.data) as TrainEvent;
      } catch {
        return;
      }
      replay.current.note(eventId(msg), ev);
      const current = jobRef.current;
      const next = current && foldEvent(current, ev);
      if (next) {
        jobRef.current = next;
        setJob(next);
        if (ev.type === "progress") {
          setSeries((prev) => appendPoint(prev, ev));
          lastStep.current = Math.max(lastStep.current ?? 0, ev.step);
        }
        return;
      }
      refresh().catch(() => undefined);
    };
    open();
    return () => {
      ended = true;
      window.clearTimeout(retry);
      window.clearInterval(tick);
      es?.close();
    };
  }, [refresh, token]);

  return <Ctx.Provider value={{ status, job, series, connected, retryInS, error, refresh }}>{children}</Ctx.Provider>;
}
