import type { ReactNode } from "react";

/** A labelled number in a stats row. */
export function Stat({ label, children, testId }: { label: string; children: ReactNode; testId?: string }) {
  return (
    <div className="stat" data-testid={testId}>
      <span className="stat-label">{label}</span>
      <span className="stat-value">{children}</span>
    </div>
  );
}
