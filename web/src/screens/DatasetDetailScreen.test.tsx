import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { DatasetDetail, UploadResult } from "../api/types";
import { type Call, datasetDetail, INFO, mockFetch } from "../test/fixtures";
import { FOLDER_REASON } from "../lib/upload";
import { DatasetDetailScreen, PAGE_SIZE } from "./DatasetDetailScreen";
import { renderWithProviders } from "../test/render";
import { stubXhr } from "../test/xhr";

const DETAIL: DatasetDetail = datasetDetail("mix");

/** The upload answer of the real server (summary=false) for a batch with one broken image and its caption. */
const UPLOADED: UploadResult = {
  name: "mix",
  committed: ["a.png", "a.txt"],
  refused: [
    { file: "broken.png", reason: "corrupt or unreadable image (cannot identify image file)" },
    { file: "broken.txt", reason: "its image broken.png was refused" },
  ],
};

/** Uploads answered with `answer`; returns the multipart file names of each. */
function fakeXhr(answer: { status: number; body: unknown }) {
  const sent: string[][] = [];
  stubXhr((form, reply) => {
    sent.push(form.getAll("files").map((f) => (f as File).name));
    setTimeout(() => reply(answer.status, answer.body), 0);
  });
  return sent;
}

function serve(deleteAnswer = { status: 200, body: { deleted: "mix" } as unknown }): Call[] {
  return mockFetch(({ url, method }) => {
    if (url === "/api/info") return { body: INFO };
    if (url === "/api/datasets/mix" && method === "DELETE") return deleteAnswer;
    if (url === "/api/datasets/mix?limit=200") return { body: DETAIL };
    return undefined;
  });
}

const renderScreen = () =>
  renderWithProviders(<DatasetDetailScreen name="mix" />, { training: false });

const file = (name: string, bytes = 10) => new File([new Uint8Array(bytes)], name);

afterEach(() => {
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
  window.location.hash = "";
});

describe("DatasetDetailScreen upload", () => {
  it("offers exactly the server's file types in the picker", async () => {
    serve();
    renderScreen();
    const picker = await screen.findByTestId("file-input");
    expect(picker.getAttribute("accept")).toBe(".png,.jpg,.jpeg,.webp,.txt,.jsonl");
  });

  it("says which files were stored and which were refused, with the reasons", async () => {
    serve();
    const sent = fakeXhr({ status: 201, body: UPLOADED });
    renderScreen();
    const picker = await screen.findByTestId("file-input");
    const user = userEvent.setup({ applyAccept: false });
    await user.upload(picker, ["a.png", "a.txt", "broken.png", "broken.txt", "scan.bmp"].map((n) => file(n)));
    const summary = await screen.findByTestId("upload-summary");
    expect(summary.textContent).toBe("2 files stored, 3 refused (listed below)");
    // and a screen reader is told, in the page's polite region (RELIABILITY 798)
    expect(screen.getByTestId("upload-announcement")).toHaveRole("status");
    expect(screen.getByTestId("upload-announcement")).toHaveTextContent("Upload finished: 2 files stored, 3 refused");
    expect(sent).toEqual([["a.png", "a.txt", "broken.png", "broken.txt"]]); // the .bmp never left
    const stored = within(screen.getByTestId("stored-files")).getAllByRole("listitem").map((li) => li.textContent);
    expect(stored).toEqual(["a.png", "a.txt"]);
    const refused = within(screen.getByTestId("refused"))
      .getAllByRole("listitem")
      .map((li) => li.textContent);
    expect(refused).toEqual([
      "scan.bmp BMP images are not accepted: convert it to PNG, JPEG or WebP",
      "broken.png corrupt or unreadable image (cannot identify image file)",
      "broken.txt its image broken.png was refused",
    ]);
  });

  it("refuses a dropped folder by name with what to do instead, and uploads the files beside it", async () => {
    serve();
    const sent = fakeXhr({ status: 201, body: { ...DETAIL, committed: ["a.png"], refused: [] } });
    renderScreen();
    const zone = await screen.findByRole("button", { name: /drop images and captions/ });
    const files = [file("a.png"), file("10_sks ball", 0)];
    const items = files.map((f) => ({ kind: "file", webkitGetAsEntry: () => ({ name: f.name, isDirectory: f.name === "10_sks ball" }) }));
    fireEvent.drop(zone, { dataTransfer: { files, items, types: ["Files"] } });
    expect((await screen.findByTestId("upload-summary")).textContent).toBe("1 file stored, 1 refused (listed below)");
    expect(sent).toEqual([["a.png"]]);
    const refused = within(screen.getByTestId("refused")).getAllByRole("listitem").map((li) => li.textContent);
    expect(refused).toEqual([`10_sks ball/ ${FOLDER_REASON}`]);
  });

  it("lists every problem when the server stored nothing", async () => {
    serve();
    fakeXhr({ status: 400, body: { error: "DatasetError", detail: "upload to mix refused", problems: ["x.png: corrupt", "x.txt: its image x.png was refused"] } });
    renderScreen();
    const user = userEvent.setup();
    await user.upload(await screen.findByTestId("file-input"), [file("x.png"), file("x.txt")]);
    expect((await screen.findByTestId("upload-summary")).textContent).toBe("0 files stored, 2 refused (listed below)");
    const refused = within(screen.getByTestId("refused")).getAllByRole("listitem").map((li) => li.textContent);
    expect(refused).toEqual(["x.png corrupt", "x.txt its image x.png was refused"]);
  });

  it.each([
    [507, "NoSpaceLeft", "no space left on device: the upload to mix (/d/mix); free some space and retry"],
    [503, "ServerStopping", "the server is stopping: send it again once the server is back"],
  ])("a %i (%s) ends the upload: the later batches are not sent, and it says how many files were not stored", async (status, error, detail) => {
    // RELIABILITY 283: each later batch was sent into the same refusal, and a batch of 32 read "1 file refused"
    serve();
    const sent = fakeXhr({ status, body: { error, detail } });
    renderScreen();
    const user = userEvent.setup();
    const files = Array.from({ length: 40 }, (_, i) => file(`img${i}.png`)); // two batches (32 + 8)
    await user.upload(await screen.findByTestId("file-input"), files);
    const stopped = await screen.findByTestId("upload-stopped");
    expect(stopped).toHaveAttribute("role", "alert");
    expect(stopped).toHaveTextContent(`Upload stopped: ${detail}. 40 files not stored`);
    expect(sent).toHaveLength(1);
    expect(screen.queryByTestId("refused")).toBeNull();
    await waitFor(() => expect(screen.getByTestId("file-input").closest(".dropzone")).not.toHaveClass("disabled"));
  });
});

describe("DatasetDetailScreen delete", () => {
  it("deletes after confirmation and goes back to the dataset list", async () => {
    const calls = serve();
    const confirm = vi.spyOn(window, "confirm").mockReturnValue(true);
    renderScreen();
    await userEvent.click(await screen.findByTestId("delete-dataset"));
    expect(confirm).toHaveBeenCalledWith("Delete dataset mix and every file in it?");
    await waitFor(() => expect(window.location.hash).toBe("#/datasets"));
    expect(calls.filter((c) => c.method === "DELETE").map((c) => c.url)).toEqual(["/api/datasets/mix"]);
  });

  it("deletes nothing when not confirmed, and shows the server's refusal", async () => {
    const calls = serve({ status: 409, body: { error: "JobActive", detail: "dataset 'mix' is used by a queued or running training job" } });
    const confirm = vi.spyOn(window, "confirm").mockReturnValue(false);
    renderScreen();
    await userEvent.click(await screen.findByTestId("delete-dataset"));
    expect(calls.some((c) => c.method === "DELETE")).toBe(false);
    confirm.mockReturnValue(true);
    await userEvent.click(screen.getByTestId("delete-dataset"));
    expect((await screen.findByTestId("delete-error")).textContent).toMatch(/used by a queued or running training job/);
    expect(screen.getByTestId("delete-dataset")).toHaveAccessibleDescription(/used by a queued or running training job/); // RELIABILITY 2060
    expect(window.location.hash).toBe("");
  });
});

describe("DatasetDetailScreen masks", () => {
  it("lays each image's loss mask over it when Show masks is ticked", async () => {
    const masked: DatasetDetail = {
      ...DETAIL,
      images: 2,
      captions: 2,
      masked: 1,
      total_files: 2,
      files: [
        { file: "a.png", caption: "a red square", bytes: 100, width: 24, height: 16, mask: "a.png" },
        { file: "b.png", caption: "a blue square", bytes: 100, width: 24, height: 16, mask: null },
      ],
    };
    mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url === "/api/datasets/mix?limit=200") return { body: masked };
      return undefined;
    });
    renderScreen();
    expect(await screen.findByTestId("dataset-counts")).toHaveTextContent("2 images · 2 captioned · 1 masked");
    expect(screen.queryByAltText("mask of a.png")).toBeNull(); // off until asked
    await userEvent.click(within(screen.getByTestId("mask-toggle")).getByRole("checkbox"));
    const overlay = await screen.findByAltText("mask of a.png");
    expect(overlay).toHaveAttribute("src", "/api/datasets/mix/masks/a.png?size=256");
    expect(overlay).toHaveClass("mask-overlay");
    expect(screen.queryByAltText("mask of b.png")).toBeNull(); // b has no mask
    await userEvent.click(within(screen.getByTestId("mask-toggle")).getByRole("checkbox"));
    expect(screen.queryByAltText("mask of a.png")).toBeNull();
  });

  it("lays an image's alpha channel over it (the mask alpha_mask reads); a masks/ mask comes first", async () => {
    const cutouts: DatasetDetail = {
      ...DETAIL,
      images: 3,
      captions: 3,
      masked: 1,
      with_alpha: 2,
      total_files: 3,
      files: [
        { file: "a.png", caption: "a", bytes: 100, width: 24, height: 16, mask: null, alpha: true },
        { file: "b.png", caption: "b", bytes: 100, width: 24, height: 16, mask: null, alpha: false },
        { file: "c.png", caption: "c", bytes: 100, width: 24, height: 16, mask: "c.png", alpha: true },
      ],
    };
    mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url === "/api/datasets/mix?limit=200") return { body: cutouts };
      return undefined;
    });
    renderScreen();
    expect(await screen.findByTestId("dataset-counts")).toHaveTextContent("3 images · 3 captioned · 1 masked · 2 with alpha");
    await userEvent.click(within(screen.getByTestId("mask-toggle")).getByRole("checkbox"));
    expect(await screen.findByAltText("alpha of a.png")).toHaveAttribute("src", "/api/datasets/mix/alpha/a.png?size=256");
    expect(screen.getByAltText("mask of c.png")).toHaveAttribute("src", "/api/datasets/mix/masks/c.png?size=256");
    expect(screen.queryByAltText("alpha of c.png")).toBeNull();
    expect(screen.queryByAltText("alpha of b.png")).toBeNull();
  });

  it("offers no mask toggle for a dataset without masks", async () => {
    serve();
    renderScreen();
    await screen.findByTestId("dataset-counts");
    expect(screen.queryByTestId("mask-toggle")).toBeNull();
  });
});

describe("DatasetDetailScreen pages", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("shows a large dataset a page at a time, with totals over every page", async () => {
    const image = (i: number) => ({ file: `img${String(i).padStart(5, "0")}.png`, caption: `c ${i}`, bytes: 10, width: 8, height: 8 });
    const page = (offset: number, count: number): DatasetDetail => ({
      ...DETAIL,
      images: 250,
      captions: 240,
      masked: 3,
      total_files: 250,
      offset,
      limit: PAGE_SIZE,
      files: Array.from({ length: count }, (_, k) => image(offset + k)),
      dropped: offset ? [{ file: `img00${offset}.txt`, reason: "not UTF-8" }] : [],
    });
    const calls = mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url === `/api/datasets/mix?limit=${PAGE_SIZE}`) return { body: page(0, PAGE_SIZE) };
      if (url === `/api/datasets/mix?offset=${PAGE_SIZE}&limit=${PAGE_SIZE}`) return { body: page(PAGE_SIZE, 50) };
      return undefined;
    });
    renderScreen();
    expect(await screen.findByTestId("dataset-counts")).toHaveTextContent("250 images · 240 captioned · 3 masked");
    const cards = () => within(screen.getByTestId("thumb-grid")).getAllByRole("textbox");
    expect(cards()).toHaveLength(PAGE_SIZE);
    await userEvent.click(screen.getByTestId("show-more"));
    await waitFor(() => expect(cards()).toHaveLength(250));
    expect(screen.queryByTestId("show-more")).toBeNull(); // every image shown
    expect(screen.getByText(/img00200.txt: not UTF-8/)).toBeTruthy(); // the page's dropped caption
    const gets = calls.filter((c) => c.url.startsWith("/api/datasets/mix?")).map((c) => c.url);
    expect(gets).toEqual([`/api/datasets/mix?limit=${PAGE_SIZE}`, `/api/datasets/mix?offset=${PAGE_SIZE}&limit=${PAGE_SIZE}`]);
  });
});
