import { useState } from "react";
import type { Checkpoint, Job, RunSummary } from "../api/types";
import { ErrorBanner } from "./ErrorBanner";
import { ResumeButton } from "./ResumeButton";
import { TrainLonger } from "./TrainLonger";

interface Props {
  run: RunSummary;
  /** The run's checkpoints, oldest first (GET /api/runs/{id}/checkpoints); null while loading. */
  checkpoints: readonly Checkpoint[] | null;
  onResumed: (job: Job) => void;
}

const LIVE: ReadonlySet<RunSummary["status"]> = new Set(["queued", "preparing", "running", "stopping"]);

/**
 * A run's checkpoints (step and folder), the Resume control with its checkpoint picker, and
 * "Train longer" (continue past the run's total steps from the newest checkpoint). A refusal of
 * either is said here, beside the controls (the page's own banner is a screen's height away).
 */
export function CheckpointsCard({ run, checkpoints, onResumed }: Props) {
  const newest = checkpoints?.at(-1);
  const [error, setError] = useState<string | null>(null);
  const resumed = (job: Job) => {
    setError(null);
    onResumed(job);
  };
  return (
    <div className="card" data-testid="checkpoints">
      <h2>Checkpoints</h2>
      {checkpoints == null ? (
        <p className="muted small">Loading…</p>
      ) : checkpoints.length === 0 ? (
        <p className="muted small">
          No checkpoints. Set <b>Checkpoint every</b> on the Train screen to keep resume points while a run trains.
        </p>
      ) : (
        <ul className="plain checkpoint-list">
          {[...checkpoints].reverse().map((c) => (
            <li key={c.name}>
              <span className="chip">step {c.step}</span>
              <span className="output-file">
                <b>
                  {c.name}
                  {c === newest && <span className="muted"> · newest</span>}
                </b>
                <code className="muted">{c.path}</code>
              </span>
            </li>
          ))}
        </ul>
      )}
      {checkpoints && checkpoints.length > 0 && run.resume_step == null && (
        <p className="muted small">
          {LIVE.has(run.status)
            ? "Resume is possible once the run has ended."
            : "Nothing to resume: the run finished all its steps. Train it longer to continue past them."}
        </p>
      )}
      {checkpoints && checkpoints.length > 0 && (
        <ResumeButton run={run} checkpoints={checkpoints} onResumed={resumed} onError={setError} />
      )}
      {checkpoints && checkpoints.length > 0 && <TrainLonger run={run} onStarted={resumed} onError={setError} />}
      <ErrorBanner message={error} testId="checkpoints-error" />
    </div>
  );
}
