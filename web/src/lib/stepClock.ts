/**
 * The Live screen's ETA, from the pace of the steps this page has seen advance (client clock):
 * the run's elapsed time would count its preparation (model loading, latent caching) and, for a
 * resumed run, divide this session's time by every step since the first run's start. The pace is
 * the run's own over its last PACE_WINDOW_MS or more (sample rounds and checkpoints in it included),
 * not since the page opened: a run whose steps got slower (a loaded host, a longer bucket) is
 * forecast at its new pace within the window (RELIABILITY 1311). Pure functions, no React. Times are `stepClockNow()`'s: the page's monotonic clock, not Date.now()
 * (the wall clock, which a time sync or a user setting it moves back or forward mid-run).
 */

/** Now (ms) on the page's monotonic clock (performance.now): the time every StepClock is read in. */
export function stepClockNow(): number {
  return performance.now();
}

/** The pace's window: the steps of about the last minute (at least this long, from a step seen). */
export const PACE_WINDOW_MS = 60_000;

/** One job's steps seen, each with when (ms) it was first seen: `first` the start of the pace's
 * window (the newest step seen at least PACE_WINDOW_MS before `last`, else the first seen), `seen`
 * those from `first` on, `last` the latest. */
export interface StepClock {
  jobId: string;
  first: { step: number; at: number };
  last: { step: number; at: number };
  seen: { step: number; at: number }[];
}

/** `clock` with `step` of job `jobId` seen at `at` (ms); a new job starts a new clock; a step seen before changes nothing. */
export function observeStep(clock: StepClock | null, jobId: string, step: number, at: number): StepClock {
  const now = { step, at };
  if (!clock || clock.jobId !== jobId || step < clock.last.step) return { jobId, first: now, last: now, seen: [now] };
  if (step === clock.last.step) return clock;
  const seen = [...clock.seen, now];
  while (seen.length > 2 && at - seen[1].at >= PACE_WINDOW_MS) seen.shift(); // the window's start: the newest old enough
  return { jobId, first: seen[0], last: now, seen };
}

/** Seconds left to step `total` at the pace of the window's steps, counting down from the latest step; null until two steps are seen. */
export function etaSeconds(clock: StepClock | null, total: number, now: number): number | null {
  if (!clock) return null;
  const { first, last } = clock;
  if (total > 0 && last.step >= total) return 0;
  if (last.step <= first.step || total <= 0) return null;
  const perStep = (last.at - first.at) / 1000 / (last.step - first.step);
  return Math.max(0, perStep * (total - last.step) - (now - last.at) / 1000);
}

/** A live job's elapsed seconds as the server measured them (`Job.elapsed_s`, its monotonic clock) and when (ms, stepClockNow()) this page got that value. */
export interface ElapsedAnchor {
  jobId: string;
  seconds: number;
  at: number;
}

/** `anchor` moved to the server's `seconds` of job `jobId` got at `at` when they are new (a fresh status snapshot); the same value again keeps it (an event folded onto the snapshot). */
export function anchorElapsed(anchor: ElapsedAnchor | null, jobId: string, seconds: number, at: number): ElapsedAnchor {
  return anchor && anchor.jobId === jobId && anchor.seconds === seconds ? anchor : { jobId, seconds, at };
}

/**
 * The job's elapsed seconds at `now`: the server's value plus this page's monotonic time since it
 * came. Never the browser's Date.now() less the server's `started_at`: two machines' wall clocks
 * (a remote server's ahead: "0s" for as long; behind: an hour too many), or one stepped mid-run.
 */
export function elapsedAt(anchor: ElapsedAnchor, now: number): number {
  return anchor.seconds + Math.max(0, now - anchor.at) / 1000;
}
