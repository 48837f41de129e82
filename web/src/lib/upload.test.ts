import { describe, expect, it } from "vitest";
import { CONTROL_SLOTS, CSV_REASON, FOLDER_REASON, inControlFolder, planControlUpload, planUpload } from "./upload";

const file = (name: string, size = 10) => new File([new Uint8Array(size)], name);

describe("planUpload", () => {
  it("keeps each caption in the batch of its image", () => {
    const files = ["a.png", "a.txt", "b.jpg", "b.txt", "c.webp", "c.txt"].map((n) => file(n));
    const plan = planUpload(files, 2);
    expect(plan.images).toBe(3);
    expect(plan.batches.map((b) => b.map((f) => f.name))).toEqual([["a.png", "a.txt", "b.jpg", "b.txt"], ["c.webp", "c.txt"]]);
    expect(plan.refused).toEqual([]);
  });

  it("refuses other file types, orphan captions, empty images and duplicates", () => {
    const plan = planUpload([file("a.png"), file("notes.pdf"), file("z.txt"), file("e.png", 0), file("a.png")]);
    expect(plan.batches.flat().map((f) => f.name)).toEqual(["a.png"]);
    const reasons = Object.fromEntries(plan.refused.map((r) => [r.file, r.reason]));
    expect(reasons["notes.pdf"]).toMatch(/not an image/);
    expect(reasons["z.txt"]).toMatch(/without a matching image/);
    expect(reasons["e.png"]).toMatch(/empty/);
    expect(plan.refused.filter((r) => r.file === "a.png")[0].reason).toMatch(/duplicate/);
  });

  it("refuses a dropped folder by name, saying how its files (or kohya N_name folders) get in", () => {
    const plan = planUpload([file("a.png"), file("10_sks ball", 0), file("img", 0)], 32, 1024, ["10_sks ball", "img"]);
    expect(plan.batches.flat().map((f) => f.name)).toEqual(["a.png"]);
    expect(plan.refused).toEqual([
      { file: "10_sks ball/", reason: FOLDER_REASON },
      { file: "img/", reason: FOLDER_REASON },
    ]);
    expect(FOLDER_REASON).toMatch(/datasets import DIR --kohya/);
    const controls = planControlUpload([file("c.png"), file("more", 0)], 32, 1024, ["more"]);
    expect(controls.batches.flat().map((f) => f.name)).toEqual(["c.png"]);
    expect(controls.refused).toEqual([{ file: "more/", reason: FOLDER_REASON }]);
  });

  it("names kohya's .caption files and a Hugging Face metadata.csv for what they are", () => {
    const plan = planUpload([file("a.png"), file("a.caption"), file("metadata.csv")]);
    expect(plan.batches.flat().map((f) => f.name)).toEqual(["a.png"]);
    expect(plan.refused).toEqual([
      { file: "a.caption", reason: "a kohya .caption file: only .txt captions are read (rename it a.txt)" },
      { file: "metadata.csv", reason: CSV_REASON },
    ]);
    expect(CSV_REASON).toMatch(/datasets import DIR/);
  });

  it("refuses .bmp by name, and the caption of a refused image names that image", () => {
    const plan = planUpload([file("a.png"), file("scan.bmp"), file("scan.txt"), file("e.png", 0), file("e.txt")]);
    expect(plan.batches.flat().map((f) => f.name)).toEqual(["a.png"]);
    const reasons = Object.fromEntries(plan.refused.map((r) => [r.file, r.reason]));
    expect(reasons["scan.bmp"]).toBe("BMP images are not accepted: convert it to PNG, JPEG or WebP");
    expect(reasons["scan.txt"]).toBe("its image scan.bmp was refused");
    expect(reasons["e.txt"]).toBe("its image e.png was refused");
  });

  it("splits by bytes and gives an oversized image a batch of its own", () => {
    const plan = planUpload([file("a.png", 60), file("b.png", 60), file("c.png", 500)], 100, 100);
    expect(plan.batches.map((b) => b.map((f) => f.name))).toEqual([["a.png"], ["b.png"], ["c.png"]]);
    expect(plan.bytes).toBe(620);
  });
});

describe("CONTROL_SLOTS", () => {
  it("offers every control folder the server reads (klein takes 4 references, FLUX.2 dev 10)", () => {
    // data/pairs.py CONTROL_FOLDER: control, control_2 ... control_10; the form offered 3, then 9
    expect(CONTROL_SLOTS).toEqual(["control", ...[2, 3, 4, 5, 6, 7, 8, 9, 10].map((n) => `control_${n}`)]);
  });
});

describe("inControlFolder", () => {
  it("takes every control folder's image (control_10 had no thumbnail) and nothing else", () => {
    expect(inControlFolder("control/a.png")).toBe(true);
    expect(inControlFolder("control_9/a.png")).toBe(true);
    expect(inControlFolder("control_10/a.png")).toBe(true);
    expect(inControlFolder("control_11/a.png")).toBe(false);
    expect(inControlFolder("control_1/a.png")).toBe(false);
    expect(inControlFolder("refs/a.png")).toBe(false);
    expect(inControlFolder("control")).toBe(false);
  });
});
