/**
 * Every other action with an effect on the server (RELIABILITY 871; a Start, Stop, Resume, Train
 * longer and Generate: unmountActions.test.tsx), answered after its screen unmounted (the user
 * opened another one meanwhile): the request went out and is not aborted (the delete, the push,
 * the fetch stands), but its answer lands nowhere: no callback of a parent gone, no jump to
 * another screen, no reload of a list gone, no console error. One table, each action in turn.
 */
import { act, render, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import type { ReactElement } from "react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { DatasetImage } from "../api/types";
import { AddFolderForm } from "../components/AddFolderForm";
import { BulkCaptions } from "../components/BulkCaptions";
import { CaptionCard } from "../components/CaptionCard";
import { FetchForm } from "../components/FetchForm";
import { PushToHub } from "../components/PushToHub";
import { type Call, CATALOGUE, deferFetch, INFO, stoppedRun } from "../test/fixtures";
import { withProviders } from "../test/render";
import { DatasetDetailScreen } from "./DatasetDetailScreen";
import { ModelsScreen } from "./ModelsScreen";
import { RunDetailScreen } from "./RunDetailScreen";
import { RunsScreen } from "./RunsScreen";

const IMAGE: DatasetImage = { file: "a.png", caption: "a cat", controls: [], mask: null, bytes: 1, width: 8, height: 8, alpha: false };
const RUN = stoppedRun();
const DATASET = { name: "shapes", path: "/d/shapes", files: [IMAGE], dropped: [], total_files: 1 };

/** What the screens load, answered at once; the action's own request (and anything unlisted) is held. */
function loads({ method, url }: Call) {
  if (method !== "GET") return undefined;
  if (url === "/api/info") return { body: INFO };
  if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
  if (url === "/api/runs" || url.startsWith("/api/runs?")) return { body: { runs: [RUN] } };
  if (url === `/api/runs/${RUN.id}`) return { body: { ...RUN, config: {}, metrics: [], outputs: [] } };
  if (url.endsWith("/samples")) return { body: { samples: [] } };
  if (url.endsWith("/checkpoints")) return { body: { checkpoints: [], resume_step: null } };
  if (url.includes("/log?")) return { body: { lines: [], truncated: false, size_bytes: 0, note: null } };
  if (url.endsWith("/loras")) return { status: 404, body: { detail: "no LoRA" } };
  if (url === "/api/models") return { body: [{ ...CATALOGUE[0], deletable: true }] };
  if (url === "/api/models/fetch") return { body: { fetches: [], offline: false } };
  if (url.startsWith("/api/datasets/shapes")) return { body: DATASET };
  if (url.startsWith("/api/datasets")) return { body: { datasets: [] } };
  return undefined;
}

interface Case {
  name: string;
  /** The component, with `spy` as each of its callbacks. */
  ui: (spy: () => void) => ReactElement;
  /** What the user does to send it. */
  act: () => Promise<void>;
  /** The held request, and its answer. */
  request: string | RegExp;
  answer: unknown;
  status?: number;
}

const click = async (name: string | RegExp) => userEvent.click(await screen.findByRole("button", { name }));

const CASES: Case[] = [
  {
    name: "Add folder (the parent adds it to its list)",
    ui: (spy) => <AddFolderForm onAdded={spy} />,
    act: async () => {
      await userEvent.type(screen.getByRole("textbox"), "/data/models/mine");
      await click("Add folder");
    },
    request: "/api/models/added",
    answer: { ...CATALOGUE[0], source: "added" },
    status: 201,
  },
  {
    name: "a model fetch (the parent follows it)",
    ui: (spy) => <FetchForm onStarted={spy} />,
    act: async () => {
      await userEvent.type(document.querySelector<HTMLInputElement>('[name="repo_id"]')!, "acme/model");
      await click("Fetch");
    },
    request: "/api/models/fetch",
    answer: { id: "f1", repo_id: "acme/model", status: "running" },
    status: 202,
  },
  {
    name: "a model delete (the list is reloaded)",
    ui: () => withProviders(<ModelsScreen />),
    act: () => click(`Delete ${CATALOGUE[0].name}`),
    request: /^\/api\/models\//,
    answer: {},
  },
  {
    name: "a push to the hub",
    ui: () => <PushToHub name="portrait" />,
    act: async () => {
      await click("Push to hub: portrait");
      await userEvent.type(screen.getByRole("textbox", { name: /Repo id/ }), "me/portrait");
      await click("Push");
    },
    request: "/api/loras/portrait/push",
    answer: { repo: "me/portrait", url: "https://hub/me/portrait", files: [] },
  },
  {
    name: "an image removed (the parent reloads its list)",
    ui: (spy) => <CaptionCard dataset="shapes" image={IMAGE} onRemoved={spy} />,
    act: () => click("remove a.png"),
    request: "/api/datasets/shapes/images/a.png",
    answer: { deleted: ["a.png", "a.txt"] },
  },
  {
    name: "a caption written",
    ui: () => <CaptionCard dataset="shapes" image={IMAGE} onRemoved={vi.fn()} />,
    act: async () => {
      await userEvent.type(screen.getByRole("textbox", { name: "caption of a.png" }), " on a mat{Control>}{Enter}{/Control}");
    },
    request: "/api/datasets/shapes/captions/a.png",
    answer: { file: "a.png", caption: "a cat on a mat" },
  },
  {
    name: "a bulk caption edit (the parent reloads)",
    ui: (spy) => <BulkCaptions name="shapes" onDone={spy} />,
    act: async () => {
      await userEvent.click(screen.getByText("Edit all captions"));
      await userEvent.type(document.querySelector<HTMLInputElement>('[name="bulk-append"]')!, ", photo");
      await click("Apply to all captions");
    },
    request: "/api/datasets/shapes/captions",
    answer: { captions: 1, changed: 1, written: true, examples: [] },
  },
  {
    name: "a dataset deleted from its page (the app goes to Datasets)",
    ui: () => withProviders(<DatasetDetailScreen name="shapes" />),
    act: async () => {
      await screen.findByText("a.png", { exact: false });
      await userEvent.click(screen.getByTestId("delete-dataset"));
    },
    request: "/api/datasets/shapes",
    answer: { name: "shapes", deleted: true },
  },
  {
    name: "a run deleted from the Runs list (the list is reloaded)",
    ui: () => withProviders(<RunsScreen />),
    act: () => click(`Delete: ${RUN.output_name}`),
    request: `/api/runs/${RUN.id}`,
    answer: { id: RUN.id, deleted: true },
  },
  {
    name: "a run deleted from its page (the app goes to Runs)",
    ui: () => withProviders(<RunDetailScreen id={RUN.id} />),
    act: () => click("Delete"),
    request: `/api/runs/${RUN.id}`,
    answer: { id: RUN.id, deleted: true },
  },
];

let errors: ReturnType<typeof vi.spyOn>;
beforeEach(() => {
  errors = vi.spyOn(console, "error");
  vi.spyOn(window, "confirm").mockReturnValue(true);
  window.location.hash = "#/here";
});
afterEach(() => {
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
  window.location.hash = "";
});

describe("an action's answer that comes after its screen unmounted", () => {
  it.each(CASES.map((c) => [c.name, c] as const))("%s: the request stands, its answer runs nothing", async (_, c) => {
    const { calls, held } = deferFetch(loads);
    const spy = vi.fn();
    const view = render(c.ui(spy));
    await c.act();
    const request = await vi.waitFor(() => held(c.request));
    expect(request.call.method).not.toBe("GET");
    view.unmount(); // the user opened another screen before the answer
    const before = calls.length;
    await act(async () => request.answer(c.answer, c.status));
    await act(() => new Promise((r) => setTimeout(r, 50))); // the answer's promise chain has run out
    expect(request.aborted).toBe(false); // the request itself stands
    expect(spy).not.toHaveBeenCalled(); // no parent gone called back
    expect(window.location.hash).toBe("#/here"); // no jump to another screen
    expect(calls.slice(before).map((call) => `${call.method} ${call.url}`)).toEqual([]); // no reload for a screen gone
    expect(errors).not.toHaveBeenCalled();
  });
});
