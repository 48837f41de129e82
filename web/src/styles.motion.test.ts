/**
 * Motion in the stylesheet (RELIABILITY 1917): no animation runs past 5 s (WCAG 2.2.2: the live
 * badge's dot blinked for as long as a run trained, on every screen, with no way to stop it), and
 * a user who asked the system for less motion gets none (prefers-reduced-motion).
 */
// @ts-expect-error -- node's fs (vitest runs the tests in node); the web's tsconfig has no node types
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const CSS: string = readFileSync("src/styles.css", "utf8"); // vitest runs in web/, where its config is

describe("the stylesheet's motion", () => {
  it("runs no animation longer than 5 s (a duration times a finite count)", () => {
    const animations = [...CSS.matchAll(/animation:\s*([^;}]+)/g)].map((m) => m[1].trim()).filter((v) => !/^none/.test(v));
    expect(animations.length).toBeGreaterThan(0); // the live badge's dot
    for (const value of animations) {
      expect(value, value).not.toMatch(/infinite/);
      const seconds = Number(/(\d*\.?\d+)s/.exec(value)?.[1]);
      const count = Number(/\s(\d+)(\s|$)/.exec(` ${value} `)?.[1] ?? 1);
      expect(seconds * count, value).toBeLessThanOrEqual(5);
    }
  });

  it("stops animations and transitions for prefers-reduced-motion", () => {
    const block = /@media \(prefers-reduced-motion: reduce\) \{([\s\S]*?)\n\}/.exec(CSS)?.[1] ?? "";
    expect(block).toMatch(/animation:\s*none/);
    expect(block).toMatch(/transition:\s*none/);
  });
});
