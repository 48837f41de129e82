import { type RefObject, useLayoutEffect, useRef, useState } from "react";

/** One problem a form shows next to a field: the field's label and the control to go to. */
interface Shown {
  label: string;
  control: HTMLElement | null;
}

/** The label a field's box gives its control: a Field's label, else a checkbox label's own text,
 * else the control's aria-label (a picker of its own). */
function labelOf(box: Element, control: HTMLElement | null): string {
  const own = box.querySelector(".field-label")?.textContent?.trim();
  if (own) return own;
  const text = [...box.childNodes]
    .filter((n) => n.nodeType === Node.TEXT_NODE)
    .map((n) => n.textContent ?? "")
    .join("")
    .trim();
  return text || control?.getAttribute("aria-label") || control?.getAttribute("name") || "a setting";
}

/** The problems shown inside `root`, in the page's order: one per field box holding a
 * `.field-error` (a field with several problems is listed once). */
function shownProblems(root: HTMLElement): Shown[] {
  const boxes: Element[] = [];
  for (const error of root.querySelectorAll(".field-error")) {
    const box = error.closest(".has-error") ?? error.parentElement;
    if (box && root.contains(box) && !boxes.includes(box)) boxes.push(box);
  }
  return boxes.map((box) => {
    // the box's own control, else (an error beside a picker, e.g. the family's) the one just before it
    const control =
      box.querySelector<HTMLElement>("input, select, textarea, [role=radio][tabindex='0']") ??
      (box.previousElementSibling?.querySelector<HTMLElement>("[role=radio][tabindex='0'], input, select, textarea") ?? null);
    return { label: labelOf(box, control), control };
  });
}

const same = (a: readonly Shown[], b: readonly Shown[]) =>
  a.length === b.length && a.every((s, i) => s.label === b[i].label && s.control === b[i].control);

/**
 * The settings a long form shows a problem beside, listed where the user pressed its buttons: a
 * Check or Start whose problems sit next to fields scrolled out of sight (a phone's screen, the
 * collapsed Advanced settings) otherwise changes nothing the user sees. Each name moves the focus
 * to its field (scrolled into view). Reads the errors the form rendered inside `scope` after each
 * render, so every problem shown is listed (a field's, a checkbox's, a picker's), none twice.
 */
export function ProblemSummary({ scope }: { scope: RefObject<HTMLElement | null> }) {
  const [shown, setShown] = useState<Shown[]>([]);
  const box = useRef<HTMLDivElement | null>(null);
  const appeared = useRef(false); // the list was empty before this render: brought into sight once
  useLayoutEffect(() => {
    const next = scope.current ? shownProblems(scope.current) : [];
    setShown((prev) => (same(prev, next) ? prev : next));
    if (appeared.current && box.current) box.current.scrollIntoView?.({ block: "nearest" });
    appeared.current = !box.current;
  });
  if (!shown.length) return null;
  const go = (s: Shown) => {
    if (!s.control) return;
    // a field inside a <details> the user collapsed since (the Advanced settings) is not rendered:
    // a browser neither scrolls to nor focuses it, so the name did nothing (RELIABILITY 1543)
    for (let d = s.control.closest("details"); d; d = d.parentElement?.closest("details") ?? null) d.open = true;
    s.control.scrollIntoView?.({ block: "center" });
    s.control.focus();
  };
  return (
    <div className="banner error problem-summary" data-testid="problem-summary" ref={box}>
      {shown.length === 1 ? "1 setting needs" : `${shown.length} settings need`} a change (its problem is shown
      beside it):{" "}
      {shown.map((s, i) => (
        <span key={`${i}-${s.label}`}>
          {i > 0 && " · "}
          <button type="button" className="link" onClick={() => go(s)}>
            {s.label}
          </button>
        </span>
      ))}
    </div>
  );
}
