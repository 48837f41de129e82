/// <reference types="vitest/config" />
import { randomUUID } from "node:crypto";
import react from "@vitejs/plugin-react";
import { defineConfig, type Plugin } from "vite";

// The build's id (RELIABILITY 2061): scripts/build_web.sh passes the hash of the sources it built;
// a build without it gets a fresh one. In the bundle (__LORASTUDIO_BUILD__, read by
// src/api/build.ts) and in dist/build-id.txt, which the server says on every /api answer
// (api/web_build.py): a page whose own id differs is of another version and asks to be reloaded.
const BUILD_ID = process.env.LORASTUDIO_WEB_BUILD || `${Date.now().toString(36)}-${randomUUID().slice(0, 8)}`;

/** Writes BUILD_ID to dist/build-id.txt (builds only). */
function buildIdFile(): Plugin {
  return {
    name: "lorastudio-build-id",
    apply: "build",
    generateBundle() {
      this.emitFile({ type: "asset", fileName: "build-id.txt", source: `${BUILD_ID}\n` });
    },
  };
}

// The dev server proxies /api to a running `lorastudio serve` (default port 7860); its pages and
// the tests have no build id (never told of updates).
export default defineConfig(({ command }) => ({
  plugins: [react(), buildIdFile()],
  define: command === "build" ? { __LORASTUDIO_BUILD__: JSON.stringify(BUILD_ID) } : {},
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 600 },
  server: { proxy: { "/api": process.env.LORASTUDIO_URL ?? "http://127.0.0.1:7860" } },
  test: {
    environment: "jsdom",
    // Each test file in a fresh VM context of a reused worker thread, not a fresh process (the
    // default "forks" pool with isolation: a new Node process, module graph and jsdom per file).
    // Each file still gets its own jsdom and module registry, so no state leaks between files
    // (--no-isolate shared them: 37 of 55 tests failed). Session 36 (RELIABILITY "suite-time audit"):
    // the 87 files took 166 CPU s under forks, 82 under vmThreads, every test passing. A worker
    // is replaced once past memoryLimit: without one (1 worker: all the memory) the contexts piled
    // up to 4.6 GB and the run cost more CPU than forks.
    pool: "vmThreads",
    poolOptions: { vmThreads: { memoryLimit: "600MB" } },
    setupFiles: ["./src/test/setup.ts"],
    include: ["src/**/*.test.{ts,tsx}"],
    css: false,
    // a screen test renders the whole screen in jsdom: 1-3 s alone, past 5 s (vitest's default)
    // on a loaded 2-core host (the CI runner beside other work)
    testTimeout: 20_000,
  },
}));
