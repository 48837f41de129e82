import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { DatasetDetail } from "../api/types";
import { INFO, mockFetch } from "../test/fixtures";
import { DatasetDetailScreen } from "./DatasetDetailScreen";
import { renderWithProviders } from "../test/render";
import { stubXhr } from "../test/xhr";

const DETAIL: DatasetDetail = {
  name: "edits",
  path: "/home/u/.lorastudio/datasets/edits",
  usable: true,
  problem: null,
  images: 2,
  captions: 1,
  markup_captions: 0, markup_counted: true,
  masked: 0,
  with_alpha: 0,
  total_files: 2,
  offset: 0,
  limit: 200,
  files: [
    { file: "a.png", caption: "make it blue", bytes: 100, width: 24, height: 16, controls: ["control/a.png", "control_2/a.jpg", "control_10/a.png"] },
    { file: "b.png", caption: null, bytes: 100, width: 24, height: 16, controls: [] },
  ],
  dropped: [{ file: "control/zzz.png", reason: "control image with no target of the same name" }],
};

/** Uploads answered 201; returns (form field, file name) of each. */
function fakeXhr() {
  const sent: [string, string][][] = [];
  stubXhr((form, reply) => {
    sent.push([...form.entries()].map(([k, v]) => [k, (v as File).name]));
    setTimeout(() => reply(201, { ...DETAIL, committed: ["control_2/b.png"], refused: [] }), 0);
  });
  return sent;
}

const renderScreen = () => {
  mockFetch(({ url }) => {
    if (url === "/api/info") return { body: INFO };
    if (url === "/api/datasets/edits?limit=200") return { body: DETAIL };
    return undefined;
  });
  return renderWithProviders(<DatasetDetailScreen name="edits" />, { training: false });
};

afterEach(() => {
  vi.unstubAllGlobals();
});

describe("DatasetDetailScreen pairs", () => {
  it("shows each target beside its control images, and orphans as not used", async () => {
    renderScreen();
    const controls = await screen.findByTestId("controls-of-a.png");
    const imgs = within(controls).getAllByRole("img");
    expect(imgs.map((i) => i.getAttribute("src"))).toEqual([
      "/api/datasets/edits/thumbnails/a.png?size=128&control=control",
      "/api/datasets/edits/thumbnails/a.jpg?size=128&control=control_2",
      "/api/datasets/edits/thumbnails/a.png?size=128&control=control_10", // FLUX.2 dev's 10th reference
    ]);
    expect(screen.queryByTestId("controls-of-b.png")).toBeNull();
    expect(screen.getByText(/control\/zzz.png: control image with no target/)).toBeInTheDocument();
  });

  it("says that removing a paired target removes its controls too", async () => {
    renderScreen();
    await screen.findByTestId("controls-of-a.png");
    const confirm = vi.spyOn(window, "confirm").mockReturnValue(false);
    await userEvent.click(screen.getByRole("button", { name: "remove a.png" }));
    expect(confirm).toHaveBeenCalledWith("Remove a.png, its caption and its control images?");
    await userEvent.click(screen.getByRole("button", { name: "remove b.png" }));
    expect(confirm).toHaveBeenLastCalledWith("Remove b.png and its caption?");
    confirm.mockRestore();
  });

  it("uploads control images into the chosen slot and refuses captions there", async () => {
    const sent = fakeXhr();
    renderScreen();
    await screen.findByTestId("controls-of-a.png");
    await userEvent.selectOptions(screen.getByLabelText("upload as"), "control_2");
    expect(screen.getByText("Drop control images into control_2/")).toBeInTheDocument();
    const user = userEvent.setup({ applyAccept: false });
    const files = ["b.png", "b.txt"].map((n) => new File([new Uint8Array(10)], n));
    await user.upload(screen.getByTestId("file-input"), files);
    await screen.findByTestId("upload-summary");
    expect(sent).toEqual([[["control_2", "b.png"]]]); // the field names the control folder
    const refused = within(screen.getByTestId("refused")).getAllByRole("listitem").map((li) => li.textContent);
    expect(refused).toEqual(["b.txt control images only (PNG, JPEG, WebP): captions go with the targets"]);
  });

  it("uploads loss masks into masks/ through the mask field", async () => {
    const sent = fakeXhr();
    renderScreen();
    await screen.findByTestId("controls-of-a.png");
    await userEvent.selectOptions(screen.getByLabelText("upload as"), "mask");
    expect(screen.getByText("Drop loss masks into masks/")).toBeInTheDocument();
    const user = userEvent.setup({ applyAccept: false });
    const files = ["a.png", "a.txt"].map((n) => new File([new Uint8Array(10)], n));
    await user.upload(screen.getByTestId("file-input"), files);
    await screen.findByTestId("upload-summary");
    expect(sent).toEqual([[["mask", "a.png"]]]); // the server stores them in masks/ (data/mask_upload.py)
    const refused = within(screen.getByTestId("refused")).getAllByRole("listitem").map((li) => li.textContent);
    expect(refused).toEqual(["a.txt loss masks only (PNG, JPEG, WebP): captions go with the images"]);
  });
});
