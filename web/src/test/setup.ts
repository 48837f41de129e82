import "@testing-library/jest-dom/vitest";
import { cleanup } from "@testing-library/react";
import { afterEach } from "vitest";
import { setPageBuildForTests } from "../api/build";
import { forgetGeneration } from "../lib/generationInFlight";
import { forgetGrid } from "../lib/stepGridInFlight";
import { forgetUploads } from "../lib/uploadsInFlight";

afterEach(() => {
  cleanup();
  window.sessionStorage.clear(); // a form's draft (lib/draft) never leaks into the next test
  forgetUploads(); // nor an upload left in flight
  forgetGeneration(); // nor a generation
  forgetGrid(); // nor a LoRA-by-step grid
  setPageBuildForTests(null); // nor a build id (api/build.ts)
});
