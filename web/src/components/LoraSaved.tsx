import { useEffect, useRef } from "react";
import { api } from "../api/endpoints";
import { href } from "../lib/route";

/** The "LoRA saved" banner of a finished job: where the file is, Download, Generate with it. Scrolled into view when it appears. */
export function LoraSaved({ jobId, path, outputName }: { jobId: string; path: string; outputName: string | null }) {
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    ref.current?.scrollIntoView?.({ block: "nearest", behavior: "smooth" });
  }, [path]);
  return (
    <div className="banner ok" ref={ref} role="status" data-testid="lora-saved">
      LoRA saved: <code>{path}</code> ·{" "}
      {outputName && (
        <>
          <a href={api.loraFileUrl(outputName)} download>
            Download
          </a>{" "}
          ·{" "}
        </>
      )}
      <a href={href("generate", jobId)}>Generate with it</a>
    </div>
  );
}
