import { vi } from "vitest";

/** What a stubbed upload's send() is handed: the form, `answer(status, body)` to complete the
 * request (now or later), and `progress(loaded, total)` to report upload progress. */
export type XhrSend = (
  form: FormData,
  answer: (status: number, body: unknown) => void,
  progress: (loaded: number, total: number) => void,
) => void;

/** Replace XMLHttpRequest (the uploads' transport: upload progress needs it) with a stand-in
 * that has exactly the members the app uses, each send() handed to `onSend`. Undo with
 * vi.unstubAllGlobals(). */
export function stubXhr(onSend: XhrSend): void {
  class StubXhr {
    status = 0;
    statusText = "";
    responseText = "";
    upload = { onprogress: null as null | ((e: { loaded: number; total: number }) => void) };
    onload: null | (() => void) = null;
    onerror: null | (() => void) = null;
    open() {}
    setRequestHeader() {}
    getResponseHeader() {
      return null; // no build id (api/build.ts)
    }
    send(form: FormData) {
      onSend(
        form,
        (status, body) => {
          this.status = status;
          this.responseText = JSON.stringify(body);
          this.onload?.();
        },
        (loaded, total) => this.upload.onprogress?.({ loaded, total }),
      );
    }
  }
  vi.stubGlobal("XMLHttpRequest", StubXhr);
}
