import { type ReactNode, useEffect, useId, useRef } from "react";

interface Props {
  title: string;
  children: ReactNode;
  /** Buttons; the footer wraps so none is clipped at narrow widths. */
  footer: ReactNode;
  onClose: () => void;
  /** Whether the body is the dialog's description, read with its name on opening (a message to
   * decide on, as the Stop dialog's consequences); not for a form, whose fields say themselves. */
  describe?: boolean;
}

/**
 * A modal dialog: focus moves to its first control and Tab cycles inside it; Escape and the
 * backdrop close it. Closed, it gives the focus back to what had it on opening (the button that
 * opened it), so a keyboard user goes on from where they were, unless that is gone or the focus
 * was moved elsewhere meanwhile.
 */
export function Dialog({ title, children, footer, onClose, describe = false }: Props) {
  const box = useRef<HTMLDivElement | null>(null);
  const bodyId = useId();
  const close = useRef(onClose); // the latest: a parent re-rendering (Live: each progress event) must not move the focus
  close.current = onClose;
  useEffect(() => {
    const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    box.current?.querySelector<HTMLElement>("input, select, textarea, button")?.focus(); // once, on opening
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape") close.current();
      if (e.key !== "Tab" || !box.current) return;
      const focusable = [...box.current.querySelectorAll<HTMLElement>("input, select, textarea, button, a[href]")].filter(
        (el) => !el.hasAttribute("disabled"),
      );
      if (!focusable.length) return;
      const first = focusable[0];
      const last = focusable[focusable.length - 1];
      const inside = box.current.contains(document.activeElement);
      if (e.shiftKey && (document.activeElement === first || !inside)) {
        e.preventDefault();
        last.focus();
      } else if (!e.shiftKey && (document.activeElement === last || !inside)) {
        e.preventDefault();
        first.focus();
      }
    };
    window.addEventListener("keydown", onKey);
    return () => {
      window.removeEventListener("keydown", onKey);
      // the dialog's nodes are gone by now: the focus it held fell to the body
      const active = document.activeElement;
      if (opener?.isConnected && (active == null || active === document.body)) opener.focus();
    };
  }, []);
  return (
    <div className="backdrop" onMouseDown={(e) => e.target === e.currentTarget && close.current()}>
      <div className="dialog" role="dialog" aria-modal="true" aria-label={title} aria-describedby={describe ? bodyId : undefined} ref={box}>
        <h2>{title}</h2>
        <div className="dialog-body" id={bodyId}>
          {children}
        </div>
        <div className="dialog-footer">{footer}</div>
      </div>
    </div>
  );
}
