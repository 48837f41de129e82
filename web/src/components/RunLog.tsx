import { useCallback, useEffect, useState } from "react";
import { api } from "../api/endpoints";
import type { RunLog as Log } from "../api/types";

/** The tail of a run's worker log (its own lines: library output, tracebacks, one line per engine event); Refresh reloads it. */
export function RunLog({ runId, lines = 500 }: { runId: string; lines?: number }) {
  const [log, setLog] = useState<Log | null>(null);
  const [error, setError] = useState<string | null>(null);
  const load = useCallback(() => {
    api.runLog(runId, lines).then(
      (l) => {
        setLog(l);
        setError(null);
      },
      (err: Error) => setError(err.message),
    );
  }, [runId, lines]);
  useEffect(load, [load]);
  return (
    <div className="card" data-testid="run-log">
      <div className="card-head">
        <h3>Log</h3>
        <button type="button" className="ghost small" onClick={load}>
          Refresh
        </button>
      </div>
      {error && <div className="banner error">{error}</div>}
      {log && log.note && <p className="muted small">{log.note}</p>}
      {log && log.lines.length > 0 && (
        <>
          {log.truncated && <p className="muted small">Showing the last {log.lines.length} lines.</p>}
          <pre className="log" aria-label="run log">
            {log.lines.join("\n")}
          </pre>
        </>
      )}
    </div>
  );
}
