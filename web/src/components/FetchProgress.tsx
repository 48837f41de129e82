import type { Fetch } from "../api/types";
import { formatBytes } from "../lib/format";
import { useRef } from "react";
import { LiveStatus } from "./LiveStatus";
import { ProgressBar } from "./ProgressBar";

/** What a screen reader is told of a download: that it runs, then how it ended (not its bytes). */
const said = (f: Fetch) => (f.status === "running" ? `Downloading ${f.repo_id}…` : `Download of ${f.repo_id} ${f.status}.`);

/** The fetches of this server's life, newest first: progress (files, bytes), Cancel while running, the error or result after. */
export function FetchProgress({ fetches, onCancel }: { fetches: Fetch[]; onCancel: (id: string) => void }) {
  // the downloads seen running here: their start and their end are said (RELIABILITY 1913), not
  // the ended ones of this server's life listed on opening the screen
  const watched = useRef(new Set<string>());
  for (const f of fetches) if (f.status === "running") watched.current.add(f.id);
  const announcement = (
    <LiveStatus
      text={fetches
        .filter((f) => watched.current.has(f.id))
        .map(said)
        .join(" ")}
      testId="fetch-announcement"
    />
  );
  return (
    <>
      {announcement /* there before the first download, so that its start is read */}
      {fetches.length > 0 && (
        <div className="card" data-testid="fetches">
          <h2>Downloads</h2>
          <ul className="plain fetches">
            {[...fetches].reverse().map((f) => (
              <li key={f.id} data-testid={`fetch-${f.repo_id}`}>
                <div className="card-head">
                  <span>
                    <b>{f.repo_id}</b> <span className={`status status-${f.status}`}>{f.status}</span>
                  </span>
                  {f.status === "running" && (
                    <button type="button" className="ghost small" onClick={() => onCancel(f.id)} aria-label={`cancel the download of ${f.repo_id}`}>
                      Cancel
                    </button>
                  )}
                </div>
                {f.status === "running" && <ProgressBar value={f.bytes_done} max={f.bytes_total} label={`download of ${f.repo_id}`} />}
                <p className="muted small">
                  {f.files_done}/{f.files_total} files · {formatBytes(f.bytes_done)} of {formatBytes(f.bytes_total)}
                  {f.already_present ? " · already on disk" : ""}
                  {f.status === "cancelled" && f.resumable ? " · fetching again continues where it stopped" : ""}
                </p>
                {f.error && <p className="field-error" role="alert">{f.error}</p>}
              </li>
            ))}
          </ul>
        </div>
      )}
    </>
  );
}
