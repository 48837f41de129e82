/// <reference types="vitest/config" />
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The dev server proxies /api to a running `lorastudio serve` (default port 7860).
export default defineConfig({
  plugins: [react()],
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 600 },
  server: { proxy: { "/api": process.env.LORASTUDIO_URL ?? "http://127.0.0.1:7860" } },
  test: {
    environment: "jsdom",
    setupFiles: ["./src/test/setup.ts"],
    include: ["src/**/*.test.{ts,tsx}"],
    css: false,
    // a screen test renders the whole screen in jsdom: 1-3 s alone, past 5 s (vitest's default)
    // on a loaded 2-core host (the CI runner beside other work)
    testTimeout: 20_000,
  },
});
