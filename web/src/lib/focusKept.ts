/**
 * A keyboard focus lost with the control that held it (RELIABILITY 2271). Deleting a run from the
 * Runs list removes its row, Delete button and all; deleting a gallery image remounts the shown
 * image's buttons; Stop and save ends the run, and the Stop button the dialog would give the focus
 * back to is gone. Each time the focus fell to the document's body: the next Tab started again at
 * the top of the page (the skip link), and a screen reader said nothing of where the user was.
 *
 * A button disabled while its action runs (Delete this image, and most others: `disabled={pending}`)
 * lost the focus the same way: Chromium's focus fix-up moves it to the body, and enabling the
 * button again does not give it back.
 *
 * `keepFocus(root)` watches `root` (the screen's `main`): when the element last focused inside it
 * was disabled and is enabled again with the focus on the body, it gives the focus back to it;
 * when it is removed and the focus is left on the body, it moves the focus, `KEEP_AFTER_MS` later (after
 * the owners that move it themselves: Dialog, useToggleFocus, useScreenChange, which run in React
 * effects), to the nearest of that element's former ancestors still on the page: where that is its own
 * parent, a control there of the same name (the same button drawn again), else the ancestor's
 * first control (a deleted row's list: its first row's), else the next ancestor up, else `root`. A focus anywhere else (the user moved it, an owner placed it) is left.
 */

export const KEEP_AFTER_MS = 60;
const CONTROLS =
  "a[href], button:not([disabled]), input:not([disabled]):not([type='hidden']), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex='-1'])";

/** An element's accessible name as far as this needs it: its label attribute, else its text. */
function nameOf(el: Element): string {
  return (el.getAttribute("aria-label") ?? el.textContent ?? "").trim();
}

/** Focus the first of `candidates` that takes it (a hidden one does not); whether one did. */
function focusFirst(candidates: Iterable<HTMLElement>): boolean {
  for (const el of candidates) {
    el.focus({ preventScroll: false });
    if (document.activeElement === el) return true;
  }
  return false;
}

/** Where the focus goes once `chain[0]` (the lost element; `chain`: it, then its ancestors up to
 * `root`'s child, as they were when it was focused) is gone: see the module's comment. */
export function refocus(chain: readonly HTMLElement[], root: HTMLElement): void {
  const lost = chain[0];
  const name = nameOf(lost);
  for (const [depth, ancestor] of chain.entries()) {
    if (depth === 0 || !ancestor.isConnected || !root.contains(ancestor)) continue;
    const controls = [...ancestor.querySelectorAll<HTMLElement>(CONTROLS)];
    // its own parent still there: the same button drawn again in it, found by its name
    const same = depth === 1 ? controls.filter((el) => el.tagName === lost.tagName && name !== "" && nameOf(el) === name) : [];
    if (focusFirst(same) || focusFirst(controls)) return;
  }
  root.focus({ preventScroll: true });
}

/** Start keeping the focus inside `root` (see the module's comment); returns the stop. */
export function keepFocus(root: HTMLElement, afterMs: number = KEEP_AFTER_MS): () => void {
  let chain: HTMLElement[] = [];
  let timer: number | undefined;
  const onFocusIn = (e: FocusEvent) => {
    chain = [];
    if (!(e.target instanceof HTMLElement) || e.target === root || !root.contains(e.target)) return;
    for (let el: HTMLElement | null = e.target; el && el !== root; el = el.parentElement) chain.push(el);
  };
  // a press elsewhere (a click on the page's background leaves the focus on the body) is the
  // user's: nothing to give back until a control is focused again
  const onPointerDown = () => {
    chain = [];
  };
  const check = () => {
    timer = undefined;
    const active = document.activeElement;
    if (!chain.length || (active && active !== document.body)) return;
    const lost = chain[0];
    if (lost.isConnected) {
      // disabled while its action ran, the browser took the focus from it: back once enabled
      if (!lost.matches(":disabled")) lost.focus({ preventScroll: true });
      return;
    }
    const gone = chain;
    chain = [];
    refocus(gone, root);
  };
  const observer = new MutationObserver(() => {
    const active = document.activeElement;
    if (!chain.length || timer !== undefined || (active && active !== document.body)) return;
    timer = window.setTimeout(check, afterMs);
  });
  observer.observe(root, { childList: true, subtree: true, attributes: true, attributeFilter: ["disabled"] });
  document.addEventListener("focusin", onFocusIn);
  document.addEventListener("pointerdown", onPointerDown, true);
  return () => {
    observer.disconnect();
    document.removeEventListener("focusin", onFocusIn);
    document.removeEventListener("pointerdown", onPointerDown, true);
    if (timer !== undefined) window.clearTimeout(timer);
  };
}
