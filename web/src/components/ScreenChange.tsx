import { type RefObject, useEffect, useRef, useState } from "react";
import { routeTitle, setPageTitle } from "../lib/pageTitle";

/**
 * What a change of screen (the route) does for a keyboard and a screen reader user (RELIABILITY
 * 1910): the browser tab's title follows the screen, the screen opened is said (the returned text,
 * for a LiveStatus; "" on the first page: the title says it), and a focus lost with the screen it
 * was in (a link or button inside the old screen, which App remounts) goes to `main`, so the next
 * Tab goes on from the top of the new screen rather than from the top of the page. A focus still
 * on the page (a top bar link) stays where it is.
 */
export function useScreenChange(route: string[], main: RefObject<HTMLElement | null>): string {
  const key = route.join("/");
  const title = routeTitle(route);
  const last = useRef<string | null>(null); // the route seen last (StrictMode runs an effect twice)
  const [said, setSaid] = useState("");
  useEffect(() => {
    setPageTitle(title);
    if (last.current === key) return;
    const first = last.current === null;
    last.current = key;
    if (first) return;
    setSaid(title);
    const active = document.activeElement;
    if (!active || active === document.body || !active.isConnected) main.current?.focus({ preventScroll: true });
  }, [key, title, main]);
  return said;
}

/** A link to the screen's content, first in the tab order, shown when focused (WCAG 2.4.1): Enter
 * moves the focus past the top bar. Not a "#main" link: the hash is the route (lib/route). */
export function SkipLink({ main, to }: { main: RefObject<HTMLElement | null>; to: string }) {
  return (
    <a
      className="skip-link"
      href={to}
      onClick={(e) => {
        e.preventDefault();
        main.current?.focus();
      }}
    >
      Skip to the screen
    </a>
  );
}
