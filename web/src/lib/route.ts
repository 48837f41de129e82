/** A tiny hash router: "#/runs/abc" -> ["runs", "abc"]. */
import { useEffect, useState } from "react";

export function parseHash(hash: string): string[] {
  return hash
    .replace(/^#\/?/, "")
    .split("/")
    .filter(Boolean)
    .map((p) => decodeURIComponent(p));
}

export function href(...parts: string[]): string {
  return `#/${parts.map((p) => encodeURIComponent(p)).join("/")}`;
}

export function navigate(...parts: string[]): void {
  window.location.hash = href(...parts);
}

/** The current route segments; re-renders on hash change. */
export function useRoute(): string[] {
  const [route, setRoute] = useState(() => parseHash(window.location.hash));
  useEffect(() => {
    const on = () => setRoute(parseHash(window.location.hash));
    window.addEventListener("hashchange", on);
    return () => window.removeEventListener("hashchange", on);
  }, []);
  return route;
}
