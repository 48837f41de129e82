/**
 * Where the server's paths are, seen from the page: the folder the UI was loaded from. The
 * server names its own paths from its root (`/api/...`, `/gallery/...`, in its answers too); a
 * reverse proxy may serve the studio under a sub-path (`https://host/studio/`), where `/api/info`
 * would reach the proxy's root instead. `served(path)` puts such a path under the page's folder:
 * `/api/info` -> `/studio/api/info` for a page at `/studio/` (the UI's own assets are relative
 * already: vite's `base: "./"`; the router is a hash, so a reload keeps the folder). Served at the
 * root it is the path unchanged. A URL with a scheme, a `//host` one and a path already under the
 * folder are left as they are.
 */

/** The folder of the page ("/" at the root, "/studio/" under a proxy's sub-path). */
export function pageFolder(): string {
  if (typeof document === "undefined") return "/";
  return new URL(".", document.baseURI).pathname;
}

/** `url` (a server path such as `/api/runs`) under the page's folder; see the module comment. */
export function served(url: string): string {
  if (!url.startsWith("/") || url.startsWith("//")) return url;
  const folder = pageFolder();
  if (folder === "/" || url.startsWith(folder)) return url;
  return folder + url.slice(1);
}
