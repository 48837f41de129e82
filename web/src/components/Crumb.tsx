import { href } from "../lib/route";

/** The "Parent /" link in front of a detail screen's title: back to the list screen `to`. */
export function Crumb({ to, label }: { to: string; label: string }) {
  return (
    <>
      <a href={href(to)} className="crumb">
        {label}
      </a>
      <span className="crumb-sep">/</span>
    </>
  );
}
