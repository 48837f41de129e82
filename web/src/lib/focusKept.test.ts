/**
 * A focus lost with its control stays near where it was (RELIABILITY 2271): before, deleting a run
 * (its row and Delete button gone), a gallery image (its buttons drawn again) or a run stopped
 * from its dialog (the Stop button gone) left the focus on the document's body.
 */
import { afterEach, describe, expect, it } from "vitest";
import { KEEP_AFTER_MS, keepFocus } from "./focusKept";

const settle = () => new Promise((resolve) => setTimeout(resolve, KEEP_AFTER_MS * 3));
let stop: (() => void) | null = null;

afterEach(() => {
  stop?.();
  stop = null;
  document.body.innerHTML = "";
});

function page(html: string): HTMLElement {
  document.body.innerHTML = `<nav><a href="#/runs" id="nav">Runs</a></nav><main tabindex="-1">${html}</main>`;
  const main = document.querySelector("main")!;
  stop = keepFocus(main);
  return main;
}

const el = (id: string) => document.getElementById(id)!;

describe("keepFocus", () => {
  it("a deleted row's button: the focus goes to the first control left in the list", async () => {
    page(`<h1>Runs</h1><button id="refresh">Refresh</button><table><tbody>
      <tr id="r1"><td><a href="#/runs/1" id="a1">one</a></td><td><button id="d1">Delete</button></td></tr>
      <tr id="r2"><td><a href="#/runs/2" id="a2">two</a></td><td><button id="d2">Delete</button></td></tr>
      </tbody></table>`);
    el("d2").focus();
    el("r2").remove();
    expect(document.activeElement).toBe(document.body); // what the browser does by itself
    await settle();
    expect(document.activeElement).toBe(el("a1"));
  });

  it("a button drawn again (the same name): the focus goes to the new one", async () => {
    page(`<section id="shown"><img alt="a"><a href="/x.png" id="dl">Download</a><button id="del">Delete this image</button></section>`);
    el("del").focus();
    el("del").replaceWith(Object.assign(document.createElement("button"), { id: "del2", textContent: "Delete this image" }));
    await settle();
    expect(document.activeElement).toBe(el("del2"));
  });

  it("the last row gone with its list: the next control up; nothing left: main", async () => {
    const main = page(`<div id="screen"><button id="refresh">Refresh</button><ul id="list"><li><button id="only">Delete</button></li></ul></div>`);
    el("only").focus();
    el("list").remove();
    await settle();
    expect(document.activeElement).toBe(el("refresh"));
    el("screen").remove();
    await settle();
    expect(document.activeElement).toBe(main);
  });

  it("a dialog's button gone with the dialog and its opener: near the dialog's place", async () => {
    page(`<div class="screen"><header id="head"><h1>run</h1><span id="status">stopped</span><a href="#/runs/1" id="runlink">its page</a></header>
      <div id="backdrop"><div role="dialog"><button id="save">Stop and save</button></div></div></div>`);
    el("save").focus();
    el("backdrop").remove();
    await settle();
    expect(document.activeElement).toBe(el("runlink")); // the screen's first control: the dialog's own ancestors are gone
  });

  it("a button disabled while its action ran: the focus back to it once enabled", async () => {
    page(`<figure><img alt="x"><button id="reuse">Reuse these settings</button><button id="del">Delete this image</button></figure>`);
    const del = el("del") as HTMLButtonElement;
    del.focus();
    del.blur(); // Chromium's focus fix-up, as the button is disabled (jsdom keeps its focus)
    del.disabled = true;
    await settle();
    expect(document.activeElement).toBe(document.body); // still disabled: nothing to focus yet
    del.disabled = false;
    await settle();
    expect(document.activeElement).toBe(del);
  });

  it("a click on the page's background is the user's: the focus stays on the body", async () => {
    page(`<ul id="list"><li id="li"><button id="x">Delete</button></li><li><button id="y">Other</button></li></ul>`);
    el("x").focus();
    document.body.dispatchEvent(new Event("pointerdown", { bubbles: true }));
    el("x").blur();
    el("li").remove();
    await settle();
    expect(document.activeElement).toBe(document.body);
  });

  it("a focus an owner placed, or one outside main, is left where it is", async () => {
    page(`<ul id="list"><li id="li"><button id="x">Delete</button></li><li><button id="y">Other</button></li></ul>`);
    el("x").focus();
    el("li").remove();
    el("y").focus(); // Dialog, useToggleFocus or the user moved it within the delay
    await settle();
    expect(document.activeElement).toBe(el("y"));
    el("nav").focus();
    el("list").remove();
    await settle();
    expect(document.activeElement).toBe(el("nav"));
  });
});
