import { useCallback, useEffect, useRef } from "react";

const FIELDS = "input:not([disabled]):not([type='hidden']), select:not([disabled]), textarea:not([disabled])";
const CONTROLS = "button:not([disabled]), a[href]";

/**
 * The keyboard focus of an inline disclosure: a button that becomes a form (Train longer…, Push
 * to hub…, Rename, Caption with AI) and a Cancel / Close that turns it back (RELIABILITY 1915).
 * The pressed button is gone, and the focus with it (to the page's body: the next Tab starts again
 * at the top of the page, a screen reader says nothing of the form). Returns the ref of what is
 * shown (a callback ref, for a button, a div or a form alike): opened, the focus goes to its first field (else its first control); closed, to the button
 * (or the first control in the element the ref is on). Only a lost focus is moved: one the user
 * put elsewhere meanwhile stays. Nothing is focused on mounting.
 * `close`: while open, Escape pressed inside what is shown calls it, as its Cancel / Close does
 * (RELIABILITY 2273; undefined while it cannot close: an action running, its Cancel disabled).
 */
export function useToggleFocus(open: boolean, close?: () => void): (el: HTMLElement | null) => void {
  const box = useRef<HTMLElement | null>(null);
  const shown = useRef(open); // what was shown last (StrictMode runs an effect twice)
  const closer = useRef(close); // the latest: a re-render must not add a listener
  closer.current = close;
  useEffect(() => {
    if (!open) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== "Escape" || e.defaultPrevented || !closer.current) return;
      if (!(e.target instanceof Node) || !box.current?.contains(e.target)) return;
      e.preventDefault();
      closer.current();
    };
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, [open]);
  useEffect(() => {
    if (shown.current === open) return;
    shown.current = open;
    const active = document.activeElement;
    if (active && active !== document.body && active.isConnected) return;
    const el = box.current;
    if (!el) return;
    const target = el.matches(`${FIELDS}, ${CONTROLS}`) ? el : (el.querySelector<HTMLElement>(FIELDS) ?? el.querySelector<HTMLElement>(CONTROLS));
    target?.focus();
  }, [open]);
  return useCallback((el: HTMLElement | null) => {
    box.current = el;
  }, []);
}
