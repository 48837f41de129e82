import { api } from "../api/endpoints";
import type { RunSummary } from "../api/types";
import { useLoad } from "../lib/latest";
import { href } from "../lib/route";

/**
 * The newest of `runs` as GET /api/runs lists them (newest first, in the order the store recorded
 * them: fix 905), or null. Not the greatest `created_at`: that is the wall clock's, and after a
 * clock set back it named an older run as "the latest" while the Runs page listed another first
 * (session 30 upgrade audit, RELIABILITY 941).
 */
export function newestRun(runs: readonly RunSummary[]): RunSummary | null {
  return runs[0] ?? null;
}

/**
 * What the Live screen shows when the server follows no job: since its start none ran (a fresh
 * server, or one restarted, which forgets the job it ran: a run it was training is now
 * "interrupted", shown by a tab that followed it, but not by one opened or reloaded since). The
 * newest run of the studio is named, with a link to its page (resume it there), so a reload after
 * a restart does not say "no job yet" of a studio that has runs; a studio without one says so.
 */
export function NoLiveJob() {
  // the newest run only: a home of thousands of runs sends one (RELIABILITY 1221)
  const runs = useLoad((signal) => api.runs(signal, { limit: 1 }).then((r) => r.runs), "runs").data;
  const newest = runs ? newestRun(runs) : null;
  return (
    <div className="empty card" data-testid="no-live-job">
      {newest ? (
        <>
          <strong>No training job since the server started</strong>
          <p>
            The latest run, <a href={href("runs", newest.id)}>{newest.output_name}</a>, is {newest.status}
            {newest.resume_step != null ? ` (its page resumes it from step ${newest.resume_step})` : ""}.
          </p>
        </>
      ) : (
        <>
          <strong>No training job yet</strong>
          <p>Start a run and follow its loss, learning rate and speed here as it trains.</p>
        </>
      )}
      <a className="button primary" href={href("train")}>
        Train a LoRA
      </a>
    </div>
  );
}
