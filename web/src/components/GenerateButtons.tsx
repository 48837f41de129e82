/** Generate's submit row: the Generate button (disabled while anything renders), Cancel while the
 * single generation in flight can be cancelled, and its progress words while it renders. */
export function GenerateButtons({
  busy,
  cancellable,
  progress,
  onCancel,
}: {
  busy: boolean;
  cancellable: boolean;
  progress: string | null | undefined;
  onCancel: () => void;
}) {
  return (
    <div className="button-row">
      <button type="submit" className="primary" disabled={busy}>
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
