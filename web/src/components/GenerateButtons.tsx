/** Generate's submit row: the Generate button (disabled while anything renders; described by
 * `describedBy`, its last refusal), Cancel while the single generation in flight can be cancelled,
 * and its progress words while it renders. */
export function GenerateButtons({
  busy,
  cancellable,
  progress,
  onCancel,
  describedBy,
}: {
  busy: boolean;
  cancellable: boolean;
  progress: string | null | undefined;
  onCancel: () => void;
  describedBy?: string;
}) {
  return (
    <div className="button-row">
      <button type="submit" className="primary" disabled={busy} aria-describedby={describedBy}>
        {busy ? "Generating…" : "Generate"}
      </button>
      {cancellable && (
        <button type="button" className="secondary" onClick={onCancel}>
          Cancel
        </button>
      )}
      {progress && (
        <span className="muted" data-testid="generate-progress">
          {progress}
        </span>
      )}
    </div>
  );
}
