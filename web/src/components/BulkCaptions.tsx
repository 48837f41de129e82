import { useState } from "react";
import { ApiError } from "../api/client";
import { api } from "../api/endpoints";
import type { BulkCaptionResult } from "../api/types";
import { ErrorBanner } from "./ErrorBanner";
import { LiveStatus } from "./LiveStatus";
import { isAbort, useAction, useLatest, useUnmountSignal } from "../lib/latest";

/**
 * Bulk caption edit of one dataset: find / replace, prepend, append over every caption.
 * "Preview" asks the server for a dry run (the count and a few before / after examples);
 * "Apply" writes (all or nothing, each file staged and renamed) and reports the count.
 */
/** The count of a bulk edit's answer: "Would change 1 of 2 caption(s)." (a Preview), "Changed ..." (written). */
const bulkSummary = (r: BulkCaptionResult) => `${r.written ? "Changed" : "Would change"} ${r.changed} of ${r.captions} caption(s).`;

export function BulkCaptions({ name, onDone }: { name: string; onDone: () => void }) {
  const [edit, setEdit] = useState({ find: "", replace: "", prepend: "", append: "" });
  const [result, setResult] = useState<BulkCaptionResult | null>(null);
  const [error, setError] = useState<string | null>(null);
  // an edit drops the Preview in flight (its counts would be of another edit)
  const previews = useLatest();
  const mounted = useUnmountSignal(); // left meanwhile: the edit is written, nobody is called back
  // one request at a time: a double click on Apply writes once
  const action = useAction(async (dry_run: boolean) => {
    const ticket = previews.begin();
    setError(null);
    try {
      const answer = dry_run ? await api.previewBulkCaptions(name, edit, ticket.signal) : await api.bulkCaptions(name, edit, mounted());
      if (dry_run && !ticket.current()) return;
      setResult(answer);
      if (!dry_run) onDone();
    } catch (err) {
      if (isAbort(err) || (dry_run && !ticket.current())) return;
      setResult(null);
      setError(err instanceof ApiError && err.problems.length ? err.problems.map((p) => p.message).join("; ") : String(err));
    }
  });
  const busy = action.pending;
  const run = (dry_run: boolean) => action.run(dry_run);
  const change = (key: keyof typeof edit, value: string) => {
    previews.cancel();
    setResult(null);
    setEdit({ ...edit, [key]: value });
  };
  const input = (key: keyof typeof edit, label: string) => (
    <label className="field">
      <span className="field-label">{label}</span>
      <input name={`bulk-${key}`} value={edit[key]} onChange={(e) => change(key, e.target.value)} />
    </label>
  );
  return (
    <details className="card bulk-captions" data-testid="bulk-captions">
      <summary>Edit all captions</summary>
      <div className="grid">
        {input("find", "Find")}
        {input("replace", "Replace with")}
        {input("prepend", "Prepend")}
        {input("append", "Append")}
      </div>
      <div className="row">
        <button type="button" className="secondary" disabled={busy} onClick={() => void run(true)}>
          Preview
        </button>
        <button type="button" className="primary" disabled={busy} onClick={() => void run(false)}>
          Apply to all captions
        </button>
      </div>
      <ErrorBanner message={error} />
      {/* the count said to a screen reader (RELIABILITY 1913); there before the first answer, so it is read */}
      <LiveStatus text={result ? bulkSummary(result) : ""} testId="bulk-announcement" />
      {result && (
        <div data-testid="bulk-result">
          <p>{bulkSummary(result)}</p>
          <ul className="small">
            {result.examples.map((e) => (
              <li key={e.file}>
                <code>{e.file}</code>: {e.before} → {e.after}
              </li>
            ))}
          </ul>
        </div>
      )}
    </details>
  );
}
