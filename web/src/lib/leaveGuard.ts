/**
 * The browser's "Leave site?" question while work of this tab would be lost by a reload or by
 * closing it: an upload being sent (its remaining batches are never sent), a LoRA-by-step grid
 * (its next images are never sent) or a caption typed and not saved yet (CaptionCard saves on
 * blur, which a reload never fires). A single generation no longer asks: it is sent to the
 * asynchronous form, which the server renders to the end, and a reload follows it again
 * (lib/generationInFlight). Moving between the app's screens is not leaving (the work goes on:
 * lib/generationInFlight, lib/uploadsInFlight).
 */
const holding = new Set<string>();

function ask(e: BeforeUnloadEvent): void {
  e.preventDefault();
  e.returnValue = ""; // older browsers ask only when it is set
}

/** Ask before leaving while `reason` holds (e.g. "generation", "upload"); `on` false releases it. */
export function holdLeave(reason: string, on: boolean): void {
  const before = holding.size > 0;
  if (on) holding.add(reason);
  else holding.delete(reason);
  const after = holding.size > 0;
  if (after && !before) window.addEventListener("beforeunload", ask);
  if (!after && before) window.removeEventListener("beforeunload", ask);
}
