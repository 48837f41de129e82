/**
 * The stylesheet's text colours against the backgrounds they sit on, by WCAG 2's contrast ratio
 * (RELIABILITY 790): at least 4.5:1 for text (AA), and links told from the text around them by more
 * than their colour (an underline). Read from styles.css itself, so a colour changed there is
 * checked here.
 */
// @ts-expect-error -- node's fs (vitest runs the tests in node); the web's tsconfig has no node types
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const CSS: string = readFileSync("src/styles.css", "utf8"); // vitest runs in web/, where its config is
const VARS = Object.fromEntries([...CSS.matchAll(/--([\w-]+):\s*(#[0-9a-fA-F]{6})/g)].map((m) => [m[1], m[2]]));

/** The declarations of the rule whose selector list is exactly `selector` (top level, one line). */
function rule(selector: string): string {
  const line = CSS.split("\n").find((l: string) => l.startsWith(`${selector} {`));
  if (!line) throw new Error(`no rule "${selector}" in styles.css`);
  return line.slice(selector.length + 2);
}

/** A rule's `property` as a #rrggbb colour (a var() resolved; `white` is #ffffff). */
function colour(selector: string, property: string): string {
  const value = new RegExp(`(?:^|[;{\\s])${property}:\\s*([^;]+);`).exec(rule(selector))?.[1].trim();
  if (!value) throw new Error(`"${selector}" sets no ${property}`);
  const v = /^var\(--([\w-]+)\)$/.exec(value)?.[1];
  const hex = v ? VARS[v] : value === "white" ? "#ffffff" : value;
  if (!/^#[0-9a-fA-F]{6}$/.test(hex ?? "")) throw new Error(`"${selector}" ${property}: ${value} is not a plain colour`);
  return hex;
}

function luminance(hex: string): number {
  const [r, g, b] = [1, 3, 5].map((i) => {
    const c = parseInt(hex.slice(i, i + 2), 16) / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

/** WCAG 2's contrast ratio of two colours (1 to 21). */
export function contrast(a: string, b: string): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

const SURFACES = ["bg", "panel", "panel-2"] as const; // the page, a card, a raised control

describe("the stylesheet's contrast", () => {
  it.each(["text", "muted", "accent", "ok", "warn", "danger"])("--%s text reads on every surface (4.5:1)", (name) => {
    for (const surface of SURFACES) expect(contrast(VARS[name], VARS[surface]), `--${name} on --${surface}`).toBeGreaterThanOrEqual(4.5);
  });

  it("a field's hint and the chart's ticks read on a card (4.5:1)", () => {
    expect(contrast(colour(".field-hint", "color"), VARS.panel)).toBeGreaterThanOrEqual(4.5);
    expect(contrast(colour(".chart .tick", "fill"), VARS.panel)).toBeGreaterThanOrEqual(4.5);
  });

  it("a primary button's white label reads on it, and on its hover (4.5:1)", () => {
    const sel = "button.primary, .button.primary";
    const hover = "button.primary:hover, .button.primary:hover";
    expect(contrast(colour(sel, "color"), colour(sel, "background"))).toBeGreaterThanOrEqual(4.5);
    expect(contrast(colour(sel, "color"), colour(hover, "background"))).toBeGreaterThanOrEqual(4.5);
  });

  it("a placeholder is told from a typed value (muted, italic) and still reads on a field (4.5:1)", () => {
    // RELIABILITY 1840: Chromium's dark placeholder (#a9a9a9) beside typed text (--text): Generate's "1024" / "28"
    // looked like values typed
    const sel = "input::placeholder, textarea::placeholder";
    expect(colour(sel, "color")).not.toBe(VARS.text);
    expect(rule(sel)).toMatch(/font-style:\s*italic/);
    expect(rule(sel)).toMatch(/opacity:\s*1/); // Firefox's own placeholder opacity would fade it below 4.5:1
    expect(contrast(colour(sel, "color"), colour("input, select, textarea", "background"))).toBeGreaterThanOrEqual(4.5);
  });

  it("a link in text is underlined, not told apart by its colour alone", () => {
    expect(rule("a")).toMatch(/text-decoration:\s*underline/);
  });
});

/** The colour a rule's `outline` draws on `surface`: a var() or #rrggbb as it is, an rgba() blended over the surface. */
function outlineOn(selector: string, surface: string): string {
  const value = /(?:^|[;{\s])outline:\s*([^;]+);/.exec(rule(selector))?.[1] ?? "";
  const v = /var\(--([\w-]+)\)/.exec(value)?.[1];
  if (v) return VARS[v];
  const hex = /#[0-9a-fA-F]{6}/.exec(value)?.[0];
  if (hex) return hex;
  const rgba = /rgba\(([^)]+)\)/.exec(value)?.[1].split(",").map(Number);
  if (!rgba) throw new Error(`"${selector}" outline: ${value} names no colour`);
  const under = [1, 3, 5].map((i) => parseInt(surface.slice(i, i + 2), 16));
  return `#${under.map((u, i) => Math.round(rgba[i] * rgba[3] + u * (1 - rgba[3])).toString(16).padStart(2, "0")).join("")}`;
}

describe("the focus ring", () => {
  // RELIABILITY 1911: the ring was rgba(124, 156, 255, 0.55): 2.85-2.99:1 on every surface, below WCAG 1.4.11's 3:1
  it.each([
    "input:focus, select:focus, textarea:focus, button:focus-visible",
    'a:focus-visible, summary:focus-visible, [tabindex="0"]:focus-visible, [role="button"]:focus-visible',
  ])("%s: a 2 px ring that shows on every surface and field (3:1)", (selector) => {
    expect(rule(selector)).toMatch(/outline:\s*2px solid /);
    for (const surface of [...SURFACES.map((s) => VARS[s]), colour("input, select, textarea", "background")]) {
      expect(contrast(outlineOn(selector, surface), surface), `${selector} on ${surface}`).toBeGreaterThanOrEqual(3);
    }
  });
});
