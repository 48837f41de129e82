/** Small formatting helpers shared by the screens. Pure functions, no React. */

/** "1h 02m", "3m 05s", "12s"; "–" for null/negative/non-finite. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds == null || !Number.isFinite(seconds) || seconds < 0) return "–";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  if (h > 0) return `${h}h ${String(m).padStart(2, "0")}m`;
  if (m > 0) return `${m}m ${String(r).padStart(2, "0")}s`;
  return `${r}s`;
}

/** Seconds between two ISO timestamps (end defaults to now); null when start is missing. */
export function secondsBetween(start: string | null | undefined, end?: string | null): number | null {
  if (!start) return null;
  const a = Date.parse(start);
  const b = end ? Date.parse(end) : Date.now();
  if (!Number.isFinite(a) || !Number.isFinite(b)) return null;
  return Math.max(0, (b - a) / 1000);
}

/**
 * A run's Duration: the server's `elapsed_s` (its start to its end on the monotonic clock of the
 * process that ran it) when it has one, else finished_at less started_at (two wall-clock stamps: a
 * clock stepped between them adds or takes the step; a live run, or one recorded without it).
 */
export function runDuration(run: { started_at: string | null; finished_at: string | null; elapsed_s?: number | null }): number | null {
  return run.elapsed_s ?? secondsBetween(run.started_at, run.finished_at);
}

/** A number with `digits` significant digits, scientific for very small/large; "–" for null. */
export function formatNumber(value: number | null | undefined, digits = 4): string {
  if (value == null || !Number.isFinite(value)) return "–";
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(2);
  return String(Number(value.toPrecision(digits)));
}

/** "12.3 GB" style memory, or "–". */
export function formatGb(value: number | null | undefined): string {
  if (value == null || !Number.isFinite(value)) return "–";
  return `${value < 10 ? value.toFixed(2) : value.toFixed(1)} GB`;
}

/** A short local date-time ("Dec 2, 14:05"). */
export function formatWhen(iso: string | null | undefined): string {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

/** Bytes as "1.2 MB". */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 ** 2) return `${(bytes / 1024).toFixed(1)} KB`;
  if (bytes < 1024 ** 3) return `${(bytes / 1024 ** 2).toFixed(1)} MB`;
  return `${(bytes / 1024 ** 3).toFixed(2)} GB`;
}

