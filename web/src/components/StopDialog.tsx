import { Dialog } from "./Dialog";

interface Props {
  /** Called with save=true (keep a LoRA of the steps run) or false (discard). */
  onStop: (save: boolean) => void;
  onCancel: () => void;
  busy?: boolean;
  step?: number;
  /** Work in flight that the stop waits for (the job's `busy.work`: "sample round", "checkpoint"...). */
  work?: string | null;
}

/**
 * "Stop training?": Continue, Stop and save, Stop and discard. Before the first step (`step` 0)
 * there is nothing to save: Continue and Stop (a stop with save, which then keeps nothing, or the
 * LoRA of a step that ended meanwhile). The footer wraps at narrow widths.
 */
export function StopDialog({ onStop, onCancel, busy, step, work }: Props) {
  if (step === 0) {
    return (
      <Dialog
        title="Stop training?"
        onClose={onCancel}
        describe
        footer={
          <>
            <button className="secondary" onClick={onCancel} disabled={busy}>
              Continue
            </button>
            <button className="danger" onClick={() => onStop(true)} disabled={busy}>
              Stop
            </button>
          </>
        }
      >
        <p data-testid="stop-nothing">No step has run yet, so there is nothing to save: stopping now writes no LoRA.</p>
      </Dialog>
    );
  }
  return (
    <Dialog
      title="Stop training?"
      onClose={onCancel}
      describe
      footer={
        <>
          <button className="secondary" onClick={onCancel} disabled={busy}>
            Continue
          </button>
          <button className="primary" onClick={() => onStop(true)} disabled={busy}>
            Stop and save
          </button>
          <button className="danger" onClick={() => onStop(false)} disabled={busy}>
            Stop and discard
          </button>
        </>
      }
    >
      <p>
        <b>Stop and save</b> writes a LoRA of the {step != null ? `${step} ` : ""}steps run so far.{" "}
        <b>Stop and discard</b> ends the run without a LoRA and deletes the checkpoints, LoRA snapshots and sample
        previews it wrote (a resumed run keeps what it resumed from).
      </p>
      <p className="muted small" data-testid="stop-wait">
        {work
          ? `A ${work} is in progress: the run stops once it is done, then saves.`
          : "A sample round or checkpoint in progress is finished first, then the run stops."}
      </p>
    </Dialog>
  );
}
