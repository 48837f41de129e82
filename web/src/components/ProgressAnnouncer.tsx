import { useRef } from "react";
import { formatDuration, formatNumber } from "../lib/format";
import { LiveStatus } from "./LiveStatus";

interface Props {
  jobId: string;
  /** The run's output name (what the user calls it). */
  name: string;
  status: string;
  step: number;
  /** 0 while unknown. */
  total: number;
  loss: number | null | undefined;
  /** Seconds left (null while unknown). */
  eta: number | null;
}

/** How many parts of a run each get one announcement while it trains (every 10 %). */
export const ANNOUNCED_PARTS = 10;

/** What a screen reader is told of a job: its step, loss and time left while it runs, else its status. */
export function progressAnnouncement({ name, status, step, total, loss, eta }: Omit<Props, "jobId">): string {
  if (status !== "running") return `${name}: ${status}${step > 0 ? ` at step ${step}${total ? ` of ${total}` : ""}` : ""}.`;
  const where = total > 0 ? `step ${step} of ${total} (${Math.floor((step / total) * 100)} %)` : `step ${step}`;
  const left = eta == null ? "" : `, about ${formatDuration(eta)} left`;
  return `${name}: ${where}, loss ${formatNumber(loss)}${left}.`;
}

/**
 * A polite live region (role=status) that tells a screen reader how a training job goes without
 * flooding it: its text changes only when the job's status changes or, while it runs, each time
 * it enters another tenth of its steps; the stats shown (which change every step and every second)
 * are not in a live region. Visually hidden: the page shows the same numbers.
 */
export function ProgressAnnouncer(props: Props) {
  const { jobId, status, step, total } = props;
  const part = status === "running" && total > 0 ? Math.min(ANNOUNCED_PARTS, Math.floor((step / total) * ANNOUNCED_PARTS)) : -1;
  const key = `${jobId}\n${status}\n${part}`;
  // the text of the moment the key last changed: a new step or ETA alone says nothing new
  const said = useRef<{ key: string; text: string } | null>(null);
  if (said.current?.key !== key) said.current = { key, text: progressAnnouncement(props) };
  return <LiveStatus text={said.current.text} testId="progress-announcement" />;
}

/**
 * A polite live region that tells a screen reader when the Live screen's updates stop (the event
 * stream lost) and when they come back (RELIABILITY 1913): the page shows it as a muted
 * "reconnecting in N s…" only. Nothing before the stream first opened (a page loading); the
 * countdown's seconds are not said.
 */
export function ConnectionAnnouncer({ connected }: { connected: boolean }) {
  const opened = useRef(false);
  const lost = useRef(false);
  if (connected) opened.current = true;
  else if (opened.current) lost.current = true;
  const text = !opened.current ? "" : connected ? (lost.current ? "Live updates back." : "") : "Live updates lost: reconnecting…";
  return <LiveStatus text={text} testId="connection-announcement" />;
}
