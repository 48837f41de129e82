import { api } from "../api/endpoints";
import { loadMessage, useLoad } from "../lib/latest";
import { ErrorBanner } from "./ErrorBanner";

/** The tail of a run's worker log (its own lines: library output, tracebacks, one line per engine event); Refresh reloads it. */
export function RunLog({ runId, lines = 500 }: { runId: string; lines?: number }) {
  // keyed by the run: a slow answer for another run never shows here; Refresh supersedes a load in flight
  const loaded = useLoad((signal) => api.runLog(runId, lines, signal), [runId, lines]);
  const log = loaded.data;
  const error = loaded.error ? loadMessage(loaded.error, "The run's log is gone: the run was deleted (in another tab or with the CLI).") : null;
  const load = () => void loaded.reload();
  return (
    <div className="card" data-testid="run-log">
      <div className="card-head">
        <h2>Log</h2>
        <button type="button" className="ghost small" onClick={load}>
          Refresh
        </button>
      </div>
      <ErrorBanner message={error} />
      {log && log.note && <p className="muted small">{log.note}</p>}
      {log && log.lines.length > 0 && (
        <>
          {log.truncated && <p className="muted small">Showing the last {log.lines.length} lines.</p>}
          {/* a scrolling box: a Tab stop (arrow keys scroll it) and a named region in every browser */}
          <pre className="log" role="region" aria-label="run log" tabIndex={0}>
            {log.lines.join("\n")}
          </pre>
        </>
      )}
    </div>
  );
}
