import { useState } from "react";
import { api } from "../api/endpoints";
import { isAbort, useAction, useUnmountSignal } from "../lib/latest";
import { allRelocated, movedPaths, otherProblems, relocatedSettings, type MovedPath } from "../lib/relocation";
import type { Checkpoint, Job, RunSummary } from "../api/types";
import { MovedPathFields } from "./MovedPathFields";

interface Props {
  run: RunSummary;
  /** The run's checkpoints (oldest first): when given, a picker chooses the one to resume from. */
  checkpoints?: readonly Checkpoint[];
  /** Called with the new job once the server accepted the resume. */
  onResumed: (job: Job) => void;
  /** Called with a user-facing message when the server refused it. */
  onError: (message: string) => void;
}

/**
 * "Resume" for a run that stopped, failed or was interrupted with a checkpoint left (the server
 * says so in `resume_step`): continues it in its folder from a checkpoint, to the original total
 * steps. Without `checkpoints` it resumes from the newest (the server's default); with them, a
 * select offers each one (newest preselected) and the resume names the picked one. Renders
 * nothing for a run that cannot be resumed. A resume refused because the run's base or dataset
 * has nothing at its recorded path any more (a moved studio home) shows an input for each
 * (MovedPathFields); the next resume sends them as its `settings`.
 */
export function ResumeButton({ run, checkpoints, onResumed, onError }: Props) {
  const [picked, setPicked] = useState<string | null>(null);
  const [moved, setMoved] = useState<MovedPath[]>([]); // paths the server found nothing at
  const mounted = useUnmountSignal();
  const [places, setPlaces] = useState<Record<string, string>>({}); // where the user says each is now
  // one request per click: a double click resumes once (before the early return: a hook)
  const action = useAction(async (checkpoint?: string) => {
    const settings = relocatedSettings(moved, places);
    const body = { ...(checkpoint ? { checkpoint } : {}), ...(Object.keys(settings).length ? { settings } : {}) };
    try {
      onResumed(await api.resumeRun(run.id, body, mounted())); // left meanwhile: it resumes, nobody is called back
    } catch (err) {
      if (isAbort(err)) return;
      const found = movedPaths(err);
      if (!found.length) return onError(err instanceof Error ? err.message : String(err));
      setMoved(found);
      const rest = otherProblems(err, found);
      if (rest.length) onError(rest.join("; "));
    }
  });
  if (run.resume_step == null) return null;
  const newest = checkpoints?.length ? checkpoints[checkpoints.length - 1] : undefined;
  const choice = checkpoints?.find((c) => c.name === picked) ?? newest;
  const step = choice?.step ?? run.resume_step;
  const busy = action.pending;
  const resume = () => action.run(choice?.name);
  const fields = (
    <MovedPathFields moved={moved} values={places} disabled={busy} onChange={(f, v) => setPlaces((p) => ({ ...p, [f]: v }))} />
  );
  const button = (
    <button
      className={checkpoints ? "primary" : "ghost small"}
      disabled={busy || !allRelocated(moved, places)}
      onClick={() => void resume()}
      title={`Continue from the checkpoint at step ${step}`}
      aria-label={busy ? `Resuming ${run.output_name}…` : `Resume from ${step}: ${run.output_name}`} // the words shown first (RELIABILITY 1914)
    >
      {busy ? "Resuming…" : `Resume from ${step}`}
    </button>
  );
  if (!checkpoints?.length || !choice)
    return moved.length ? (
      <div className="resume-moved">
        {fields}
        {button}
      </div>
    ) : (
      button
    );
  return (
    <div className="resume-picker">
      <select aria-label="checkpoint to resume from" value={choice.name} disabled={busy} onChange={(e) => setPicked(e.target.value)}>
        {[...checkpoints].reverse().map((c) => (
          <option key={c.name} value={c.name}>
            step {c.step}
            {c === newest ? " (newest)" : ""}
          </option>
        ))}
      </select>
      {fields}
      {button}
    </div>
  );
}
