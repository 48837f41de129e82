import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Info } from "../api/types";
import { INFO, mockFetch } from "../test/fixtures";
import { DatasetsScreen } from "./DatasetsScreen";
import { renderWithProviders } from "../test/render";

afterEach(() => {
  vi.unstubAllGlobals();
  window.location.hash = "";
});

const PROBLEM = "the studio cannot use this name (must not contain ?): rename the folder";
const NFD = "cafe\u0301";

function infoWith(extra: Info["datasets"]): Info {
  return { ...INFO, datasets: [...INFO.datasets, ...extra] };
}

function renderWith(info: Info, after: Info) {
  let renamed = false;
  const calls = mockFetch(({ url, method }) => {
    if (url === "/api/info") return { body: renamed ? after : info };
    if (method === "POST" && url.endsWith("/rename")) {
      renamed = true;
      return { body: { renamed: "x", name: "y" } };
    }
    return undefined;
  });
  renderWithProviders(<DatasetsScreen />, { training: false });
  return calls;
}

const row = (name: string) => screen.getByText(name, { selector: "span, a" }).closest("tr") as HTMLElement;

describe("DatasetsScreen: a folder the studio cannot use (made by hand)", () => {
  it("is greyed with the server's reason, not a link, and renamed by its Rename action", async () => {
    const bad = { name: "what?", path: "/d/what?", images: 3, captions: 3, markup_captions: 0, markup_counted: true, usable: false, problem: PROBLEM };
    const fixed = { ...bad, name: "what", path: "/d/what", usable: true, problem: null };
    const calls = renderWith(infoWith([bad]), infoWith([fixed]));
    await screen.findByText("what?");
    const tr = row("what?");
    expect(tr.className).toBe("unusable");
    expect(within(tr).getByRole("note").textContent).toBe(`Unusable: ${PROBLEM}`);
    expect(within(tr).queryByRole("link")).toBeNull(); // neither its detail nor "Train on it"
    expect(row("shapes").className).toBe("");

    const user = userEvent.setup();
    await user.click(within(tr).getByRole("button", { name: /^Rename/ }));
    const field = screen.getByLabelText("new name for what?");
    await user.clear(field);
    await user.type(field, "what?"); // the new-name rule, before anything is sent
    await user.click(within(tr).getByRole("button", { name: /^Rename/ }));
    expect(within(tr).getByRole("alert").textContent).toBe('must not contain any of " * : < > ? |');
    expect(field).toHaveAttribute("aria-invalid", "true"); // RELIABILITY 1918: tied to its field
    expect(field).toHaveAccessibleDescription('must not contain any of " * : < > ? |');
    expect(calls.filter((c) => c.method === "POST")).toEqual([]);

    await user.clear(field);
    await user.type(field, "what");
    await user.click(within(tr).getByRole("button", { name: /^Rename/ }));
    await waitFor(() => expect(screen.getByRole("link", { name: "what" })).toBeTruthy());
    const posts = calls.filter((c) => c.method === "POST");
    expect(posts.map((c) => [c.url, c.body])).toEqual([["/api/datasets/what%3F/rename", { to: "what" }]]);
    expect(screen.queryByText("what?")).toBeNull();
  });

  it("offers an NFD name's own NFC form and shows the server's refusal", async () => {
    const bad = { name: NFD, path: `/d/${NFD}`, images: 1, captions: 0, markup_captions: 0, markup_counted: true, usable: false, problem: "NFD: rename the folder" };
    const calls = mockFetch(({ url, method }) => {
      if (url === "/api/info") return { body: infoWith([bad]) };
      if (method === "POST") return { status: 409, body: { error: "DatasetBusy", detail: "dataset is busy: a caption job holds it" } };
      return undefined;
    });
    renderWithProviders(<DatasetsScreen />, { training: false });
    await screen.findByText(NFD);
    const tr = row(NFD);
    const user = userEvent.setup();
    await user.click(within(tr).getByRole("button", { name: /^Rename/ }));
    const field = screen.getByLabelText(`new name for ${NFD}`) as HTMLInputElement;
    expect(field.value).toBe("café".normalize("NFC"));
    expect(field.value).not.toBe(NFD);
    await user.click(within(tr).getByRole("button", { name: /^Rename/ }));
    expect((await within(tr).findByRole("alert")).textContent).toContain("busy");
    expect(calls.filter((c) => c.method === "POST").map((c) => c.body)).toEqual([{ to: "café".normalize("NFC") }]);
  });

  it("is deleted by its listed name after a confirm; a busy refusal is shown, a 404 is done", async () => {
    const bad = { name: "what?", path: "/d/what?", images: 3, captions: 3, markup_captions: 0, markup_counted: true, usable: false, problem: PROBLEM };
    let gone = false;
    let answer = { status: 409, body: { error: "DatasetBusy", detail: "dataset is busy: a caption job holds it" } };
    const calls = mockFetch(({ url, method }) => {
      if (url === "/api/info") return { body: gone ? INFO : infoWith([bad]) };
      if (method === "DELETE") {
        if (answer.status === 200) gone = true;
        return answer;
      }
      return undefined;
    });
    const confirm = vi.fn(() => false);
    vi.stubGlobal("confirm", confirm);
    renderWithProviders(<DatasetsScreen />, { training: false });
    await screen.findByText("what?");
    const user = userEvent.setup();
    const deleteButton = () => within(row("what?")).getByRole("button", { name: "delete what?" });
    await user.click(deleteButton()); // declined: nothing sent
    expect(confirm).toHaveBeenCalledWith("Delete the folder what? and every file in it?");
    expect(calls.filter((c) => c.method === "DELETE")).toEqual([]);

    confirm.mockReturnValue(true);
    await user.click(deleteButton()); // busy: the server's reason beside it, the row stays
    expect((await within(row("what?")).findByRole("alert")).textContent).toContain("busy");
    expect(deleteButton()).toHaveAccessibleDescription(/busy/); // read with the button it refused (RELIABILITY 2060)

    answer = { status: 404, body: { error: "NotFound", detail: "no dataset what?" } as never };
    gone = true; // deleted meanwhile elsewhere: what was asked is done
    await user.click(deleteButton());
    await waitFor(() => expect(screen.queryByText("what?")).toBeNull());
    const deletes = calls.filter((c) => c.method === "DELETE").map((c) => c.url);
    expect(deletes).toEqual(["/api/datasets/what%3F", "/api/datasets/what%3F"]);
  });
});
