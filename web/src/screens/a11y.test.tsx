/**
 * The accessibility sweep (RELIABILITY 281-): every screen rendered with fixture data, and again
 * with every load refused, checked generically: each form control has an accessible name, each
 * error is announced (role=alert) and tied to the control of its field (aria-invalid +
 * aria-describedby), each action is a button or link reachable by keyboard (no clickable
 * div/span), nothing keeps saying "Loading…" once the server answered, and the Stop dialog traps
 * the focus and closes on Escape; each screen has one h1 and no heading level skipped, every table
 * header is named, and a scrolling log is a named Tab stop (RELIABILITY 791-793); a button's or
 * link's name holds the words it shows (RELIABILITY 1914).
 */
import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import type { ReactElement } from "react";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { CheckpointList, DatasetDetail, GalleryImage, RunDetail, RunSummary } from "../api/types";
import { Field } from "../components/Field";
import { CATALOGUE, type Call, datasetDetail, galleryImage, INFO, JOB, mockFetch, runDetail, stoppedRun } from "../test/fixtures";
import { DatasetDetailScreen } from "./DatasetDetailScreen";
import { DatasetsScreen } from "./DatasetsScreen";
import { GenerateScreen } from "./GenerateScreen";
import { LiveScreen } from "./LiveScreen";
import { ModelsScreen } from "./ModelsScreen";
import { RunDetailScreen } from "./RunDetailScreen";
import { RunsScreen } from "./RunsScreen";
import { TrainScreen } from "./TrainScreen";
import { renderWithProviders } from "../test/render";

const RUN: RunDetail = runDetail("/o/portrait");
const CHECKPOINTS: CheckpointList = { checkpoints: [{ name: "step-120", step: 120, path: "/o/portrait/checkpoints/step-120" }], resume_step: 120 };
const DETAIL: DatasetDetail = datasetDetail("shapes");
const IMAGE: GalleryImage = galleryImage([{ name: "portrait", scale: 0.8 }]);
const LORAS = { root: "/o", loras: [{ name: "portrait", family: "flux", path: "/o/portrait/portrait.safetensors", bytes: 2048, modified: 1, sidecar: null }] };
const STEPS = { name: "portrait", loras: [{ step: 120, final: true, path: "/o/portrait/portrait.safetensors", url: "/api/loras/portrait/file" }] };

// two of each listed thing, so that controls named alike across rows show (RELIABILITY 2272)
const OTHER_RUN: RunSummary = stoppedRun({ id: "r2", output_name: "landscape" });
const QUEUE = [
  { id: "q1", output_name: "queued-one", family: "flux", created_at: "2025-01-01T00:00:00Z" },
  { id: "q2", output_name: "queued-two", family: "flux", created_at: "2025-01-01T00:00:00Z" },
];

/** The fixture server of every screen; `live`: a run in training (the Live screen's Stop). */
function fixtureServer(live = false) {
  return ({ url }: Call): { status?: number; body: unknown } | undefined => {
    if (url === "/api/info") return { body: INFO };
    if (url.startsWith("/api/train/status")) return { body: live ? { job: JOB, queue: QUEUE, busy: true, event_seq: 1 } : { job: null, queue: QUEUE, busy: false, event_seq: 0 } };
    if (url === "/api/models") return { body: CATALOGUE };
    if (url === "/api/models/fetch") return { body: { fetches: [], offline: false } };
    if (url === "/api/runs" || url.startsWith("/api/runs?")) return { body: { runs: [RUN, OTHER_RUN] } };
    if (url === "/api/runs/r1") return { body: RUN };
    if (url === "/api/runs/r1/samples") return { body: { samples: [] } };
    if (url === "/api/runs/r1/checkpoints") return { body: CHECKPOINTS };
    if (url === "/api/runs/r1/loras" || url === "/api/loras/portrait/steps") return { body: STEPS };
    if (url.startsWith("/api/runs/r1/log")) return { body: { lines: ["a line"], truncated: false, size_bytes: 7, note: null } };
    if (url.startsWith("/api/datasets/shapes")) return { body: DETAIL };
    if (url.startsWith("/api/loras?")) return { body: LORAS };
    if (url === "/api/gallery") return { body: { images: [IMAGE] } };
    return undefined;
  };
}

/** Every load but /api/info refused by a server stopping (503), as the new server answers. */
function stoppingServer({ url }: Call): { status?: number; body: unknown } {
  if (url === "/api/info") return { body: INFO };
  return { status: 503, body: { error: "ServerStopping", detail: "the server is stopping: send it again once the server is back" } };
}

/** Each screen, and what a user does there to send the server something (when loading sends nothing of its own). */
const SCREENS: [string, () => ReactElement, (() => Promise<void>)?][] = [
  ["Datasets", () => <DatasetsScreen />],
  ["Dataset detail", () => <DatasetDetailScreen name="shapes" />],
  ["Train", () => <TrainScreen />, () => userEvent.click(screen.getByRole("button", { name: "Check" }))],
  ["Live", () => <LiveScreen />],
  ["Runs", () => <RunsScreen />],
  ["Run detail", () => <RunDetailScreen id="r1" />],
  ["Generate", () => <GenerateScreen />],
  ["Models", () => <ModelsScreen />],
];

const renderIn = (el: ReactElement) =>
  renderWithProviders(el);

/** Wait until the fetches stop coming and the screen no longer says it is loading. */
async function settle(calls: Call[]) {
  let seen = -1;
  await waitFor(
    () => {
      const now = calls.length;
      const loading = [...document.querySelectorAll("body *")].some((el) => el.children.length === 0 && /^Loading…$/.test(el.textContent ?? ""));
      const same = now === seen;
      seen = now;
      if (!same || loading) throw new Error(`still loading (${now} calls, "Loading…" shown: ${loading})`);
    },
    { timeout: 5000, interval: 100 },
  );
}

const describeEl = (el: Element) => el.outerHTML.slice(0, 160);
const hidden = (el: Element) => !!el.closest("[hidden], [aria-hidden='true']") || (el as HTMLInputElement).type === "hidden";

/** Whether `el` has a non-blank accessible name (jest-dom's computation, as a screen reader's). */
function hasName(el: Element): boolean {
  try {
    expect(el).toHaveAccessibleName(/\S/);
    return true;
  } catch {
    return false;
  }
}

/** Form controls without an accessible name. */
function unnamedControls(root: HTMLElement): string[] {
  return [...root.querySelectorAll("input, select, textarea, [role='slider'], [role='textbox'], [role='combobox']")]
    .filter((el) => !hidden(el) && !hasName(el))
    .map(describeEl);
}

const ACTIONABLE = new Set(["BUTTON", "A", "INPUT", "SELECT", "TEXTAREA", "LABEL", "SUMMARY", "OPTION"]);

/** Elements React gave a click handler that a keyboard cannot reach or press: not a button, link or
 * control, unless it has an interactive role, a tabIndex >= 0 and a key handler. */
function clickableNonButtons(root: HTMLElement): string[] {
  const out: string[] = [];
  for (const el of root.querySelectorAll("*")) {
    const key = Object.keys(el).find((k) => k.startsWith("__reactProps$"));
    const props = key ? (el as unknown as Record<string, Record<string, unknown>>)[key] : undefined;
    if (!props?.onClick || ACTIONABLE.has(el.tagName)) continue;
    const role = el.getAttribute("role");
    const keyboard = role && ["button", "link", "tab", "checkbox", "menuitem"].includes(role) && (el as HTMLElement).tabIndex >= 0 && props.onKeyDown;
    if (!keyboard) out.push(describeEl(el));
  }
  // a link without href is not in the tab order; a button taken out of it neither
  // (a radio group's or tab list's other options: one Tab stop, arrow keys move, as native radios)
  for (const el of root.querySelectorAll("a:not([href]), button[tabindex='-1']")) {
    const group = el.closest("[role='radiogroup'], [role='tablist']");
    if (group && group.querySelector("[tabindex='0']")) continue;
    out.push(describeEl(el));
  }
  return out;
}

/** Error texts not announced, and field errors whose field's controls do not point to them. */
function unannouncedErrors(root: HTMLElement): string[] {
  const out: string[] = [];
  for (const el of root.querySelectorAll(".field-error, .banner.error, .error")) {
    if (!el.closest("[role='alert']")) out.push(`not announced: ${describeEl(el)}`);
  }
  for (const err of root.querySelectorAll(".field .field-error")) {
    const field = err.closest(".field") as HTMLElement;
    for (const control of field.querySelectorAll("input, select, textarea")) {
      if (hidden(control)) continue;
      const ids = (control.getAttribute("aria-describedby") ?? "").split(/\s+/);
      if (control.getAttribute("aria-invalid") !== "true" || !err.id || !ids.includes(err.id)) out.push(`not tied to its error: ${describeEl(control)}`);
    }
  }
  return out;
}

/** The screen's headings out of order: not exactly one h1, first; or a level skipped on the way down
 * (h1 then h3), which a screen reader's list of headings shows as a missing section. */
function headingProblems(root: HTMLElement): string[] {
  const levels = [...root.querySelectorAll("h1, h2, h3, h4, h5, h6")].filter((h) => !hidden(h)).map((h) => Number(h.tagName[1]));
  const out: string[] = [];
  if (levels.filter((l) => l === 1).length !== 1 || levels[0] !== 1) out.push(`not one h1 first: h${levels.join(" h")}`);
  levels.forEach((l, i) => {
    if (i > 0 && l > levels[i - 1] + 1) out.push(`h${levels[i - 1]} then h${l}`);
  });
  return out;
}

/** Table headers with no name (an actions column): a screen reader reads each cell under nothing. */
function unnamedHeaders(root: HTMLElement): string[] {
  return [...root.querySelectorAll("th")].filter((th) => !(th.textContent ?? "").trim() && !th.getAttribute("aria-label")).map(describeEl);
}

/** Words of a text, lower case, without punctuation ("Train longer…" -> "train longer"). */
const words = (text: string) => text.toLowerCase().replace(/[^\p{L}\p{N}]+/gu, " ").trim();

/** Buttons and links whose accessible name (an aria-label) does not contain their visible text
 * (WCAG 2.5.3, label in name): a voice control user says what they see ("click Train longer")
 * and nothing answers (RELIABILITY 1914). Icons and numbers alone (no letter) are left out. */
function labelNotInName(root: HTMLElement): string[] {
  return [...root.querySelectorAll("button[aria-label], a[aria-label]")]
    .filter((el) => !hidden(el))
    .filter((el) => {
      const seen = words(el.textContent ?? "");
      return /\p{L}/u.test(seen) && !words(el.getAttribute("aria-label") ?? "").includes(seen);
    })
    .map((el) => `"${el.textContent}" named "${el.getAttribute("aria-label")}"`);
}

/** An element's accessible name as far as this sweep needs it: aria-label, else its text. */
const accessibleName = (el: Element) => words(el.getAttribute("aria-label") ?? el.textContent ?? "");

/** Buttons, and links to different places, that share one accessible name (the rows of a list:
 * "Delete", "Delete", "Open", "Open"): a screen reader's list of buttons or links, and a voice
 * control user, cannot tell which run each is for (WCAG 2.4.6; RELIABILITY 2272). */
function namedAlike(root: HTMLElement): string[] {
  const seen = new Map<string, Set<string>>();
  for (const el of root.querySelectorAll("button, a[href]")) {
    if (hidden(el)) continue;
    const key = `${el.tagName} ${accessibleName(el)}`;
    const target = el.tagName === "A" ? (el.getAttribute("href") ?? "") : `button ${seen.get(key)?.size ?? 0}`;
    seen.set(key, (seen.get(key) ?? new Set()).add(target));
  }
  return [...seen].filter(([, targets]) => targets.size > 1).map(([key, targets]) => `${key} (${targets.size})`);
}

/** Scrolling text boxes (a log) that a keyboard cannot reach to scroll, or that have no name. */
function unreachableScrollers(root: HTMLElement): string[] {
  return [...root.querySelectorAll("pre")]
    .filter((el) => el.tabIndex < 0 || el.getAttribute("role") !== "region" || !hasName(el))
    .map(describeEl);
}

afterEach(() => vi.unstubAllGlobals());

describe("accessibility of every screen", () => {
  it.each(SCREENS)("%s, with fixture data: named controls, keyboard actions, announced errors, headings, table headers", async (_, make) => {
    const calls = mockFetch(fixtureServer());
    const { container } = renderIn(make());
    await settle(calls);
    expect(unnamedControls(container)).toEqual([]);
    expect(clickableNonButtons(container)).toEqual([]);
    expect(unannouncedErrors(container)).toEqual([]);
    expect(headingProblems(container)).toEqual([]);
    expect(unnamedHeaders(container)).toEqual([]);
    expect(unreachableScrollers(container)).toEqual([]);
    expect(labelNotInName(container)).toEqual([]);
    expect(namedAlike(container)).toEqual([]);
  });

  it.each(SCREENS.filter(([name]) => name !== "Datasets"))("%s, every load refused (503): the refusal is announced and nothing keeps loading", async (_, make, act) => {
    const calls = mockFetch(stoppingServer);
    const { container } = renderIn(make());
    await settle(calls);
    if (act) {
      await act();
      await settle(calls);
    }
    expect(within(container).getAllByRole("alert").some((a) => /server is stopping/.test(a.textContent ?? ""))).toBe(true);
    expect(unannouncedErrors(container)).toEqual([]);
    expect(unnamedControls(container)).toEqual([]);
  });

  it("Run detail: the scrolling log is a named region a keyboard reaches (Tab) to scroll", async () => {
    const calls = mockFetch(fixtureServer());
    renderIn(<RunDetailScreen id="r1" />);
    await settle(calls);
    const log = await screen.findByRole("region", { name: "run log" });
    expect(log).toHaveTextContent("a line");
    log.scrollIntoView = () => undefined;
    for (let i = 0; i < 40 && document.activeElement !== log; i++) await userEvent.tab();
    expect(document.activeElement).toBe(log);
  });

  it("a field's error is announced and tied to its control", () => {
    render(
      <Field label="Seed" error="must be a whole number" hint="any number">
        <input name="seed" />
      </Field>,
    );
    const input = screen.getByRole("textbox", { name: /Seed/ });
    expect(input).toHaveAttribute("aria-invalid", "true");
    expect(input).toHaveAccessibleDescription("must be a whole number");
    expect(screen.getByRole("alert")).toHaveTextContent("must be a whole number");
  });

  it("Generate: the server's field problems are tied to their inputs", async () => {
    const calls = mockFetch((call) => {
      if (call.method === "POST" && call.url === "/api/generations") {
        return { status: 400, body: { error: "ConfigError", detail: "invalid", problems: [{ field: "seed", message: "must be at least 0" }, { field: "prompt", message: "is empty" }, { field: "loras.0", message: "LoRA 'portrait' not found" }] } };
      }
      return fixtureServer()(call);
    });
    const { container } = renderIn(<GenerateScreen />);
    await settle(calls);
    await userEvent.click(await screen.findByRole("checkbox", { name: "use LoRA portrait" }));
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(container.querySelectorAll(".field .field-error")).toHaveLength(3));
    expect(screen.getByRole("checkbox", { name: "use LoRA portrait" })).toHaveAccessibleDescription("#1: LoRA 'portrait' not found");
    expect(screen.getByRole("textbox", { name: /Seed/ })).toHaveAccessibleDescription("must be at least 0");
    expect(unannouncedErrors(container)).toEqual([]);
  });

  it("Dataset detail: a caption refused on a full disk (507) keeps the text typed, announced and tied to its caption", async () => {
    const calls = mockFetch((call) => {
      if (call.method === "PUT" && call.url.startsWith("/api/datasets/shapes/captions/")) {
        return { status: 507, body: { error: "NoSpaceLeft", detail: "no space left on device: caption a.txt; free some space and retry" } };
      }
      return fixtureServer()(call);
    });
    const { container } = renderIn(<DatasetDetailScreen name="shapes" />);
    await settle(calls);
    const caption = screen.getByRole("textbox", { name: "caption of a.png" });
    await userEvent.clear(caption);
    await userEvent.type(caption, "a blue square{Control>}{Enter}{/Control}");
    await waitFor(() => expect(caption).toHaveAccessibleDescription("no space left on device: caption a.txt; free some space and retry"));
    expect(caption).toHaveAttribute("aria-invalid", "true");
    expect(caption).toHaveValue("a blue square");
    expect(unannouncedErrors(container)).toEqual([]);
  });

  /** The open dialog: named, holds the focus, keeps Tab and Shift+Tab inside, names its controls, closes on Escape. */
  async function checkDialog() {
    const dialog = await screen.findByRole("dialog");
    expect(dialog).toHaveAccessibleName(/\S/);
    expect(dialog).toContainElement(document.activeElement as HTMLElement);
    for (let i = 0; i < 8; i++) {
      await userEvent.tab();
      expect(dialog).toContainElement(document.activeElement as HTMLElement);
    }
    for (let i = 0; i < 3; i++) {
      await userEvent.tab({ shift: true });
      expect(dialog).toContainElement(document.activeElement as HTMLElement);
    }
    expect(unnamedControls(dialog)).toEqual([]);
    expect(clickableNonButtons(dialog)).toEqual([]);
    await userEvent.keyboard("{Escape}");
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
  }

  it("Live: the Stop dialog takes the focus, keeps Tab inside, and closes on Escape", async () => {
    const calls = mockFetch(fixtureServer(true));
    const { container } = renderIn(<LiveScreen />);
    await settle(calls);
    await screen.findByRole("button", { name: "Cancel: queued-two" }); // the queue's rows, told apart
    expect(namedAlike(container)).toEqual([]);
    await userEvent.click(await screen.findByRole("button", { name: /^Stop/ }));
    await checkDialog();
  });

  it("Models: the hub token dialog of a gated repo takes the focus, keeps Tab inside, and closes on Escape", async () => {
    const calls = mockFetch((call) => {
      if (call.method === "POST" && call.url === "/api/models/fetch") {
        return { status: 403, body: { error: "ModelAccessDenied", detail: "acme/gated is gated: accept its licence", problems: [], hub_status: 403 } };
      }
      return fixtureServer()(call);
    });
    renderIn(<ModelsScreen />);
    await settle(calls);
    await userEvent.type(document.querySelector('[name="repo_id"]') as HTMLInputElement, "acme/gated");
    await userEvent.click(screen.getByRole("button", { name: "Fetch" }));
    await checkDialog();
  });
});
