import { useId, useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import { placeProblems } from "../lib/problems";
import { isAbort, useAction, useUnmountSignal } from "../lib/latest";
import { allRelocated, movedPaths, relocatedSettings, type MovedPath } from "../lib/relocation";
import type { Job, RunSummary } from "../api/types";
import { MovedPathFields } from "./MovedPathFields";
import { useToggleFocus } from "../lib/toggleFocus";

interface Props {
  run: RunSummary;
  /** Called with the new job once the server accepted the extension. */
  onStarted: (job: Job) => void;
  /** Called with a user-facing message when the server refused it for another reason than the
   * steps (a problem of the steps is said under their input, where the user is looking). */
  onError: (message: string) => void;
}

/**
 * "Train longer" for a stopped or finished run with a checkpoint (the server offers it in
 * `train_longer`): asks the new total steps, above the run's total, and resumes the run from its
 * newest checkpoint with `steps` set to it (POST /api/runs/{id}/resume {settings: {steps}}); the
 * LR schedule is the one a fresh run of that total would have (training/resume/extend.py). Renders
 * nothing for a run that cannot be trained longer (live, no checkpoint, counts epochs). Refused
 * because the run's base or dataset has nothing at its recorded path any more (a moved studio
 * home), it shows an input for each (MovedPathFields), sent with the steps the next time.
 */
export function TrainLonger({ run, onStarted, onError }: Props) {
  const offer = run.train_longer;
  const [open, setOpen] = useState(false);
  const [value, setValue] = useState(() => String(offer ? offer.steps * 2 : ""));
  // the server's refusal of these steps (e.g. over its 10,000,000 limit), said under the input until it is edited
  const [refused, setRefused] = useState<string | null>(null);
  const noteId = useId(); // the note under the input says what the steps do, or why they are refused
  const [moved, setMoved] = useState<MovedPath[]>([]); // paths the server found nothing at
  const mounted = useUnmountSignal();
  const [places, setPlaces] = useState<Record<string, string>>({}); // where the user says each is now
  // one request per click: Enter and a click start one run
  const action = useAction(async (steps: number) => {
    setRefused(null);
    try {
      const settings = { steps, ...relocatedSettings(moved, places) };
      onStarted(await api.resumeRun(run.id, { settings }, mounted())); // left meanwhile: it runs, nobody is called back
    } catch (err) {
      if (isAbort(err)) return;
      const found = movedPaths(err);
      if (found.length) setMoved(found);
      const mine = (f: string) =>
        f === "steps" || f === "settings.steps" || found.some((m) => f === m.field || f === `settings.${m.field}`);
      const placed = err instanceof ApiError ? placeProblems(err.problems, mine) : null;
      const own = placed && (placed.fields.steps ?? placed.fields["settings.steps"]);
      if (own) setRefused(own);
      if (placed?.general.length) onError(placed.general.join("; "));
      else if (!own && !found.length) onError(err instanceof Error ? err.message : String(err)); // the moved paths: said at their inputs
    }
  });
  const busy = action.pending;
  // the focus to the form opened, back to the button on Cancel (or Escape)
  const toggled = useToggleFocus(open, busy ? undefined : () => setOpen(false));
  if (!offer) return null;
  const steps = Number(value);
  const valid = value.trim() !== "" && Number.isInteger(steps) && steps > offer.steps && allRelocated(moved, places);
  const start = () => action.run(steps);
  if (!open) {
    return (
      <div className="train-longer" ref={toggled}>
        <button className="ghost" onClick={() => setOpen(true)} aria-label={`Train longer: ${run.output_name}`}>
          Train longer…
        </button>
      </div>
    );
  }
  return (
    <form
      ref={toggled}
      className="train-longer"
      data-testid="train-longer"
      onSubmit={(e) => {
        e.preventDefault();
        if (valid) void start();
      }}
    >
      <label>
        New total steps
        <input
          type="number"
          name="train_longer_steps"
          min={offer.steps + 1}
          step={1}
          value={value}
          disabled={busy}
          onChange={(e) => {
            setValue(e.target.value);
            setRefused(null);
          }}
          aria-invalid={!valid || refused != null}
          aria-describedby={noteId}
        />
      </label>
      <p className={refused ? "field-error" : "muted small"} id={noteId} role={refused ? "alert" : undefined}>
        {refused ??
          (valid
            ? `Continues from the checkpoint at step ${offer.from_step} to step ${steps}; the learning-rate schedule is the one a ${steps}-step run has.`
            : `Set more than the run's ${offer.steps} steps.`)}
      </p>
      <MovedPathFields moved={moved} values={places} disabled={busy} onChange={(f, v) => setPlaces((p) => ({ ...p, [f]: v }))} />
      <div className="train-longer-actions">
        <button type="submit" className="primary" disabled={!valid || busy}>
          {busy ? "Starting…" : valid ? `Train to ${steps} steps` : "Train longer"}
        </button>
        <button type="button" className="ghost" disabled={busy} onClick={() => setOpen(false)}>
          Cancel
        </button>
      </div>
    </form>
  );
}
