import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { CatalogueModel, Fetch } from "../api/types";
import { BaseModelPicker } from "../components/BaseModelPicker";
import { choicesFromCatalogue } from "../lib/baseModels";
import { type Call, CATALOGUE, mockFetch } from "../test/fixtures";
import { ModelsScreen, removal } from "./ModelsScreen";

const ADDED: CatalogueModel = { ...CATALOGUE[0], id: "added:abc", name: "my-sdxl", source: "added", family: "sdxl", deletable: false, path: "/data/my-sdxl" };
const CACHE: CatalogueModel = { ...CATALOGUE[0], id: "hub:x", name: "acme/cached", source: "hub-cache", deletable: false, trainable: false, reason: "no family trains QwenImageEditPipeline" };
const running = (over: Partial<Fetch> = {}): Fetch => ({
  id: "f1", repo_id: "acme/gated", revision: null, status: "running", commit: "abc", family: "flux", files_done: 1, files_total: 4,
  bytes_done: 1024, bytes_total: 4096, model_id: null, path: null, error: null, resumable: false, already_present: false, offline: false,
  created_at: "2025-01-01T00:00:00Z", finished_at: null, ...over,
});

describe("ModelsScreen", () => {
  let calls: Call[];
  let fetches: Fetch[];
  beforeEach(() => {
    fetches = [];
    calls = mockFetch(({ method, url, body }) => {
      if (url === "/api/models" && method === "GET") return { body: [CATALOGUE[0], ADDED, CACHE] };
      if (url === "/api/models/fetch" && method === "GET") return { body: { fetches, offline: false } };
      if (url === "/api/models/fetch" && method === "POST") {
        const token = (body as { token?: string }).token;
        if (token !== "hf_good") return { status: 403, body: { error: "ModelAccessDenied", detail: "acme/gated is gated: accept its licence", problems: [], hub_status: 403 } };
        fetches = [running()];
        return { status: 202, body: fetches[0] };
      }
      if (url === "/api/models/fetch/f1/cancel") {
        fetches = [running({ status: "cancelled", resumable: true })];
        return { body: fetches[0] };
      }
      if (method === "POST" && url === "/api/models/added") return { status: 201, body: ADDED };
      if (method === "DELETE") return { body: {} };
      return undefined;
    });
  });
  afterEach(() => vi.unstubAllGlobals());

  it("lists every base model with its source, family and state, and what removing each one does", async () => {
    render(<ModelsScreen />);
    const table = await screen.findByTestId("models-table");
    const rows = within(table).getAllByRole("row").slice(1);
    expect(rows.map((r) => within(r).getAllByRole("cell")[2].textContent)).toEqual(["tiny demo", "added folder", "hub cache"]);
    expect(rows[2]).toHaveTextContent("no family trains QwenImageEditPipeline");
    expect(removal(CACHE)).toBeNull(); // the hub cache is not lorastudio's to delete
    vi.spyOn(window, "confirm").mockReturnValue(true);
    await userEvent.click(within(rows[1]).getByRole("button", { name: "Forget my-sdxl" }));
    await userEvent.click(within(rows[0]).getByRole("button", { name: "Delete tiny-flux" }));
    await waitFor(() => expect(calls.filter((c) => c.method === "DELETE").map((c) => c.url)).toEqual(["/api/models/added/added%3Aabc", "/api/models/tiny-flux"]));
  });

  it("asks for a hub token for a gated repo, fetches with it, shows progress and cancels", async () => {
    render(<ModelsScreen />);
    await screen.findByTestId("models-table");
    await userEvent.type(document.querySelector('[name="repo_id"]') as HTMLInputElement, "acme/gated");
    await userEvent.click(screen.getByRole("button", { name: "Fetch" }));
    const dialog = await screen.findByRole("dialog");
    expect(dialog).toHaveTextContent("acme/gated is gated: accept its licence");
    await userEvent.type(within(dialog).getByLabelText("Hub token"), "hf_good");
    await userEvent.click(within(dialog).getByRole("button", { name: "Fetch with this token" }));
    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    const posts = calls.filter((c) => c.method === "POST" && c.url === "/api/models/fetch").map((c) => c.body);
    expect(posts).toEqual([{ repo_id: "acme/gated", revision: null }, { repo_id: "acme/gated", revision: null, token: "hf_good" }]);
    const item = await screen.findByTestId("fetch-acme/gated");
    expect(within(item).getByRole("progressbar")).toHaveAttribute("aria-valuenow", "1024");
    expect(item).toHaveTextContent("1/4 files");
    await userEvent.click(within(item).getByRole("button", { name: "cancel the download of acme/gated" }));
    await waitFor(() => expect(screen.getByTestId("fetch-acme/gated")).toHaveTextContent("fetching again continues"));
  });

  it("lists the captioning models apart: licence, size, state; fetches one not on disk by its hub id", async () => {
    const toFetch: CatalogueModel = {
      ...CATALOGUE[0], id: "Qwen--Qwen2.5-VL-7B-Instruct", name: "Qwen/Qwen2.5-VL-7B-Instruct", source: "catalogue", path: "", family: null,
      trainable: false, reason: "a captioning model", size_bytes: 16_600_000_000, complete: false, deletable: false, kind: "captioner",
      repo_id: "Qwen/Qwen2.5-VL-7B-Instruct", licence: "Apache-2.0", checkpoint: "Qwen2.5-VL 7B Instruct: the most detailed",
      missing: ["not fetched: `lorastudio models fetch Qwen/Qwen2.5-VL-7B-Instruct`"],
    };
    const fetched: CatalogueModel = { ...toFetch, id: "tiny-vlm", name: "tiny-vlm", source: "tiny", path: "/m/tiny-vlm", size_bytes: 1000, complete: true,
      deletable: true, repo_id: null, licence: null, checkpoint: null, missing: [] };
    calls = mockFetch(({ method, url }) => {
      if (url === "/api/models" && method === "GET") return { body: [CATALOGUE[0], toFetch, fetched] };
      if (url === "/api/models/fetch" && method === "GET") return { body: { fetches, offline: false } };
      if (url === "/api/models/fetch" && method === "POST") {
        fetches = [running({ repo_id: "Qwen/Qwen2.5-VL-7B-Instruct", family: null })];
        return { status: 202, body: fetches[0] };
      }
      return undefined;
    });
    render(<ModelsScreen />);
    const bases = await screen.findByTestId("models-table");
    expect(within(bases).getAllByRole("row").slice(1)).toHaveLength(1); // captioners are not base models
    const rows = within(screen.getByTestId("captioners-table")).getAllByRole("row").slice(1);
    expect(rows[0]).toHaveTextContent("Apache-2.0");
    expect(rows[0]).toHaveTextContent("~15.46 GB");
    expect(rows[0]).toHaveTextContent("not fetched");
    expect(rows[1]).toHaveTextContent("ready");
    expect(within(rows[1]).getByRole("button", { name: "Delete tiny-vlm" })).toBeTruthy();
    await userEvent.click(within(rows[0]).getByRole("button", { name: "Fetch Qwen/Qwen2.5-VL-7B-Instruct" }));
    await waitFor(() =>
      expect(calls.filter((c) => c.method === "POST").map((c) => c.body)).toEqual([{ repo_id: "Qwen/Qwen2.5-VL-7B-Instruct", revision: null }]),
    );
    expect(await screen.findByTestId("fetch-Qwen/Qwen2.5-VL-7B-Instruct")).toBeTruthy();
    // the base-model pickers never offer a captioner (kind "captioner": not trainable, not a base)
    expect(choicesFromCatalogue([CATALOGUE[0], toFetch, fetched]).map((c) => c.name)).toEqual([CATALOGUE[0].name]);
  });

  it("adds a folder", async () => {
    render(<ModelsScreen />);
    await screen.findByTestId("models-table");
    await userEvent.type(document.querySelector('[name="model_folder"]') as HTMLInputElement, "/data/my-sdxl");
    await userEvent.click(screen.getByRole("button", { name: "Add folder" }));
    await waitFor(() => expect(calls.find((c) => c.url === "/api/models/added")?.body).toEqual({ path: "/data/my-sdxl" }));
  });
});

describe("BaseModelPicker without a model of the family", () => {
  it("links to the Models screen", () => {
    render(<BaseModelPicker name="base_model" models={[]} family="sdxl" value="" onChange={() => undefined} />);
    expect(screen.getByRole("link", { name: "Fetch or add a sdxl model on the Models screen" })).toHaveAttribute("href", "#/models");
  });
});
