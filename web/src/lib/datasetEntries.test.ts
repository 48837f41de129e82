import { describe, expect, it } from "vitest";
import { INFO } from "../test/fixtures";
import { buildEntries, emptyRow, entriesValue, parseRows, rowsValue } from "./datasetEntries";
import { buildConfig, initialValues } from "./trainForm";

const flux = INFO.families.find((f) => f.name === "flux")!;

describe("datasets entries", () => {
  it("rows become the config's entries: repeats or weight, the numbers parsed, blanks left to the run", () => {
    const rows = [
      { ...emptyRow("shapes"), amount: "10", trigger_word: "sks" },
      { ...emptyRow("faces"), mode: "weight" as const, amount: "0.5", loss_weight: "2", resolution: "512" },
      { ...emptyRow("more"), resolution: "512, 768" },
    ];
    expect(buildEntries(rows)).toEqual([
      { path: "shapes", repeats: 10, trigger_word: "sks" },
      { path: "faces", weight: 0.5, loss_weight: 2, resolution: 512 },
      { path: "more", resolution: [512, 768] },
    ]);
    expect(buildEntries([{ ...emptyRow("shapes"), amount: "1.5" }])).toBe("folder 1: repeats must be a whole number");
    expect(buildEntries([emptyRow("")])).toBe("folder 1: pick a dataset");
  });

  it("each row's own caption options: default caption, tag shuffle (on / off / the run's), keep tags, tag dropout", () => {
    const rows = [
      { ...emptyRow("tags"), shuffle_tags: "on" as const, keep_tokens: "2", tag_dropout: "0.1", default_caption: "a photo" },
      { ...emptyRow("plain"), shuffle_tags: "off" as const },
      emptyRow("run"),
    ];
    expect(buildEntries(rows)).toEqual([
      { path: "tags", shuffle_tags: true, keep_tokens: 2, tag_dropout: 0.1, default_caption: "a photo" },
      { path: "plain", shuffle_tags: false },
      { path: "run" },
    ]);
    expect(buildEntries([{ ...emptyRow("tags"), keep_tokens: "1.5" }])).toBe("folder 1: keep_tokens must be a whole number");
    expect(buildEntries([{ ...emptyRow("tags"), tag_dropout: "x" }])).toBe("folder 1: tag_dropout must be a number");
    const entries = [{ path: "tags", shuffle_tags: true, keep_tokens: 1, tag_dropout: 0.2, default_caption: "sks", loss_weight: 1 }];
    const back = parseRows(entriesValue(entries))[0];
    expect([back.shuffle_tags, back.keep_tokens, back.tag_dropout, back.default_caption, back.extra]).toEqual(["on", "1", "0.2", "sks", {}]);
    expect(buildEntries(parseRows(entriesValue(entries)))).toEqual([{ path: "tags", shuffle_tags: true, keep_tokens: 1, tag_dropout: 0.2, default_caption: "sks" }]);
  });

  it("a config's entries round-trip through the form value", () => {
    const entries = [{ path: "shapes", repeats: 3, loss_weight: 1 }, { path: "faces", weight: 2, loss_weight: 0.5, caption_dropout: 0.1 }];
    expect(buildEntries(parseRows(entriesValue(entries)))).toEqual([
      { path: "shapes", repeats: 3 },
      { path: "faces", weight: 2, loss_weight: 0.5, caption_dropout: 0.1 },
    ]);
  });

  it("the run's resolution: one side, or several", () => {
    const one = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "d", resolution: "512" }, flux, INFO.config_rules);
    expect(one.config.resolution).toBe(512);
    const many = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "d", resolution: "512, 768,1024" }, flux, INFO.config_rules);
    expect(many.config.resolution).toEqual([512, 768, 1024]);
    const bad = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "d", resolution: "512, x" }, flux, INFO.config_rules);
    expect(bad.problems.resolution).toBe("whole numbers separated by commas");
  });

  it("the form sends datasets instead of data_dir, and names a bad row", () => {
    const rows = rowsValue([{ ...emptyRow("shapes"), amount: "4" }, emptyRow("faces")]);
    const built = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "shapes", datasets: rows }, flux, INFO.config_rules);
    expect(built.problems).toEqual({});
    expect(built.config.datasets).toEqual([{ path: "shapes", repeats: 4 }, { path: "faces" }]);
    expect(built.config).not.toHaveProperty("data_dir");
    const bad = buildConfig({ ...initialValues(flux), base_model: "m", datasets: rowsValue([emptyRow("")]) }, flux, INFO.config_rules);
    expect(bad.problems).toEqual({ datasets: "folder 1: pick a dataset" });
  });
});

describe("datasets entries: captions per folder", () => {
  it("default caption, tag shuffle, keep tokens and tag dropout round-trip; a blank leaves the run's", () => {
    const entries = [
      { path: "tags", shuffle_tags: true, keep_tokens: 2, tag_dropout: 0.1, default_caption: "a cat" },
      { path: "plain", shuffle_tags: false },
      { path: "runs", loss_weight: 1 },
    ];
    expect(buildEntries(parseRows(entriesValue(entries)))).toEqual([
      { path: "tags", shuffle_tags: true, keep_tokens: 2, tag_dropout: 0.1, default_caption: "a cat" },
      { path: "plain", shuffle_tags: false },
      { path: "runs" },
    ]);
    expect(buildEntries([{ ...emptyRow("x"), keep_tokens: "1.5" }])).toBe("folder 1: keep_tokens must be a whole number");
    expect(buildEntries([{ ...emptyRow("x"), tag_dropout: "lots" }])).toBe("folder 1: tag_dropout must be a number");
  });
});
