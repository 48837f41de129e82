import type { RunSummary } from "../api/types";

/** The question before a run's delete, worded for what the server will do (DELETE /api/runs/{id}):
 * a record whose output folder other records share (a Resume records a new run in the same folder)
 * goes without its files, which go with the last record holding them (`shared_with`). */
export function deleteQuestion(run: Pick<RunSummary, "output_name" | "shared_with">): string {
  const others = run.shared_with ?? [];
  if (!others.length) return `Delete run ${run.output_name} and its files?`;
  const who = others.length === 1 ? `another record of it (${others[0]}) uses` : `${others.length} other records of it (${others.join(", ")}) use`;
  return `Delete this record of run ${run.output_name}? Its files stay: ${who} the same folder, and they go with the last record of it.`;
}
