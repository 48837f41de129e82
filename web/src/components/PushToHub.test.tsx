import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { mockFetch } from "../test/fixtures";
import { PushToHub } from "./PushToHub";

afterEach(() => vi.unstubAllGlobals());

const PUSHED = {
  repo_id: "me/portrait",
  url: "https://huggingface.co/me/portrait",
  commit: "abc",
  files: ["README.md", "portrait.json", "portrait.safetensors", "samples/step-000100-0.png"],
};

async function openForm() {
  await userEvent.click(screen.getByRole("button", { name: "Push to hub: portrait" }));
  return screen.getByRole("textbox", { name: "Repo id" });
}

describe("PushToHub", () => {
  it("pushes to the typed repo, creating it private when asked, and links it", async () => {
    const calls = mockFetch((call) => (call.url === "/api/loras/portrait/push" ? { status: 201, body: PUSHED } : undefined));
    render(<PushToHub name="portrait" />);
    await userEvent.type(await openForm(), "me/portrait");
    await userEvent.click(screen.getByRole("checkbox", { name: /Create the repo/ }));
    await userEvent.click(screen.getByRole("checkbox", { name: "Private" }));
    await userEvent.click(screen.getByRole("button", { name: "Push" }));
    const link = await screen.findByRole("link", { name: "me/portrait" });
    expect(link).toHaveAttribute("href", "https://huggingface.co/me/portrait");
    expect(screen.getByRole("status")).toHaveTextContent("Pushed 4 files");
    expect(calls.map((c) => [c.method, c.url, c.body])).toEqual([
      ["POST", "/api/loras/portrait/push", { repo: "me/portrait", create: true, private: true }],
    ]);
  });

  it("sends nothing for a repo id without an owner", async () => {
    const calls = mockFetch(() => ({ status: 201, body: PUSHED }));
    render(<PushToHub name="portrait" />);
    await userEvent.type(await openForm(), "portrait{Enter}");
    expect(screen.getByRole("button", { name: "Push" })).toBeDisabled();
    expect(calls).toEqual([]);
  });

  it("shows the server's reason when the push is refused", async () => {
    mockFetch(() => ({
      status: 400,
      body: { error: "HubTokenMissing", detail: "no hub token to push with: set LORASTUDIO_HF_TOKEN", problems: [] },
    }));
    render(<PushToHub name="portrait" />);
    await userEvent.type(await openForm(), "me/portrait");
    await userEvent.click(screen.getByRole("button", { name: "Push" }));
    await waitFor(() => expect(screen.getByRole("alert")).toHaveTextContent("LORASTUDIO_HF_TOKEN"));
    expect(screen.getByRole("button", { name: "Push" })).toBeEnabled();
  });
});
