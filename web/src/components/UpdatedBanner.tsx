import { STALE_MESSAGE, useStale } from "../api/build";
import { LiveStatus } from "./LiveStatus";

/**
 * Once the server said it runs another build of the studio than this page's (an upgrade or a roll
 * back since the page was loaded; api/build.ts, RELIABILITY 2061): a banner asking for a reload,
 * with a Reload button, said politely once. Until then this page starts no run and no generation
 * (its forms may lack settings the running version has); everything else still works.
 */
export function UpdatedBanner({ reload = () => window.location.reload() }: { reload?: () => void }) {
  const stale = useStale();
  return (
    <>
      <LiveStatus text={stale ? STALE_MESSAGE : ""} testId="updated-announcement" />
      {stale && (
        <div className="banner warn updated" data-testid="updated-banner">
          <b>{STALE_MESSAGE}</b> This page was loaded from the version before: its forms may lack settings the
          running one has, so it starts no run or generation until reloaded.{" "}
          <button type="button" className="primary small" onClick={reload}>
            Reload
          </button>
        </div>
      )}
    </>
  );
}
