import type { ReactNode } from "react";

/**
 * A box that scrolls sideways (a wide table), as a named region and a Tab stop: a keyboard user
 * reaches it and scrolls it with the arrow keys even when nothing inside it takes the focus, and a
 * screen reader names it. Use it for a scrolling box whose content may hold no link or button.
 */
export function ScrollRegion({ label, className = "table-wrap", children }: { label: string; className?: string; children: ReactNode }) {
  return (
    <div className={className} role="region" aria-label={label} tabIndex={0}>
      {children}
    </div>
  );
}
