/**
 * The browser tab's title of each screen (WCAG 2.4.2): what a screen reader says on arriving at a
 * page, what the tab, the history and a bookmark show. Named as the top bar names the screens;
 * an item's screen names its item (a dataset, a run once loaded).
 */

/** The studio's name, after the screen's in every title. */
export const STUDIO = "lorastudio";

/** The screen's part of the title for a route (lib/route's segments), as App.Screen picks the screen. */
export function routeTitle(route: string[]): string {
  const [top, arg] = route;
  switch (top) {
    case "datasets":
      return arg ? `Dataset ${arg}` : "Datasets";
    case "live":
      return "Live";
    case "runs":
      return arg ? "Run" : "Runs"; // its id says nothing: RunDetailScreen names the run once loaded
    case "generate":
      return "Generate";
    case "again":
      return "Generate again";
    case "models":
      return "Models";
    case "clone":
      return "Train (a run's settings)";
    case "train":
      return arg ? `Train on ${arg}` : "Train";
    default:
      return "Train"; // the start page, and a route App does not know
  }
}

/** Set the browser tab's title to `screen` and the studio's name. */
export function setPageTitle(screen: string): void {
  document.title = `${screen} – ${STUDIO}`;
}
