import { useState } from "react";
import { api } from "../api/endpoints";
import type { Job, RunSummary } from "../api/types";

interface Props {
  run: RunSummary;
  /** Called with the new job once the server accepted the resume. */
  onResumed: (job: Job) => void;
  /** Called with a user-facing message when the server refused it. */
  onError: (message: string) => void;
}

/**
 * "Resume" for a run of the history that stopped, failed or was interrupted with a checkpoint
 * left (the server says so in `resume_step`): continues it in its folder from that checkpoint,
 * to the original total steps. Renders nothing for a run that cannot be resumed.
 */
export function ResumeButton({ run, onResumed, onError }: Props) {
  const [busy, setBusy] = useState(false);
  if (run.resume_step == null) return null;
  const resume = async () => {
    setBusy(true);
    try {
      onResumed(await api.resumeRun(run.id));
    } catch (err) {
      onError(err instanceof Error ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <button
      className="ghost small"
      disabled={busy}
      onClick={() => void resume()}
      title={`Continue from the checkpoint at step ${run.resume_step}`}
      aria-label={`resume ${run.output_name} from step ${run.resume_step}`}
    >
      {busy ? "Resuming…" : `Resume from ${run.resume_step}`}
    </button>
  );
}
