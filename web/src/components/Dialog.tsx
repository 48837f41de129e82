import { type ReactNode, useEffect, useRef } from "react";

interface Props {
  title: string;
  children: ReactNode;
  /** Buttons; the footer wraps so none is clipped at narrow widths. */
  footer: ReactNode;
  onClose: () => void;
}

/** A modal dialog: focus moves into it, Escape and the backdrop close it. */
export function Dialog({ title, children, footer, onClose }: Props) {
  const box = useRef<HTMLDivElement | null>(null);
  useEffect(() => {
    box.current?.querySelector<HTMLElement>("button")?.focus();
    const onKey = (e: KeyboardEvent) => e.key === "Escape" && onClose();
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [onClose]);
  return (
    <div className="backdrop" onMouseDown={(e) => e.target === e.currentTarget && onClose()}>
      <div className="dialog" role="dialog" aria-modal="true" aria-label={title} ref={box}>
        <h2>{title}</h2>
        <div className="dialog-body">{children}</div>
        <div className="dialog-footer">{footer}</div>
      </div>
    </div>
  );
}
