import { type DragEvent, useRef, useState } from "react";
import { PICKER_ACCEPT } from "../lib/upload";

interface Props {
  /** The files picked or dropped; `folders`: the names of dropped entries that are folders. */
  onFiles: (files: File[], folders?: string[]) => void;
  disabled?: boolean;
  /** A control folder ("control", "control_2" ...) the dropped images go to, or "mask" (loss masks
   * into masks/); none: targets and captions. */
  control?: string;
}

/** Drop images and .txt captions here, or click to pick them (Enter or Space from the keyboard: the
 * same picker); while `disabled` (an upload running) neither opens it, and it says so (aria-disabled). */
export function DropZone({ onFiles, disabled, control }: Props) {
  const input = useRef<HTMLInputElement | null>(null);
  const [over, setOver] = useState(false);
  const drop = (e: DragEvent) => {
    e.preventDefault();
    setOver(false);
    if (disabled || !e.dataTransfer.files.length) return;
    // a dropped folder comes as a File of its name: its entry says it is a directory
    const entries = Array.from(e.dataTransfer.items ?? []).map((item) => item.webkitGetAsEntry?.());
    const folders = entries.filter((entry) => entry?.isDirectory).map((entry) => entry!.name);
    onFiles(Array.from(e.dataTransfer.files), folders);
  };
  return (
    <div
      className={`dropzone${over ? " over" : ""}${disabled ? " disabled" : ""}`}
      onDragOver={(e) => {
        e.preventDefault();
        setOver(true);
      }}
      onDragLeave={() => setOver(false)}
      onDrop={drop}
      onClick={() => !disabled && input.current?.click()}
      role="button"
      tabIndex={0}
      onKeyDown={(e) => {
        if (e.key !== "Enter" && e.key !== " ") return;
        e.preventDefault(); // Space presses the button: it must not scroll the page too
        if (!disabled) input.current?.click(); // as a click: nothing while an upload runs
      }}
      aria-disabled={disabled || undefined}
      aria-label={
        control === "mask"
          ? "drop loss masks for masks/, or click to choose files"
          : control
            ? `drop control images for ${control}/, or click to choose files`
            : "drop images and captions, or click to choose files"
      }
    >
      {control === "mask" ? (
        <>
          <strong>Drop loss masks into masks/</strong>
          <span className="muted small">grey images, white = trained · each masks the image of the same name and size (a.png + masks/a.png) · or click to choose</span>
        </>
      ) : control ? (
        <>
          <strong>Drop control images into {control}/</strong>
          <span className="muted small">PNG, JPEG, WebP · each pairs with the target of the same name (a.png + {control}/a.png) · or click to choose</span>
        </>
      ) : (
        <>
          <strong>Drop images and .txt captions</strong>
          <span className="muted small">PNG, JPEG, WebP (not BMP) · captions pair by file name (cat.png + cat.txt) · or click to choose</span>
        </>
      )}
      <input
        ref={input}
        type="file"
        multiple
        hidden
        data-testid="file-input"
        accept={PICKER_ACCEPT}
        onChange={(e) => {
          const files = Array.from(e.target.files ?? []);
          e.target.value = "";
          if (files.length) onFiles(files);
        }}
      />
    </div>
  );
}
