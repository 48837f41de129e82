import { describe, expect, it } from "vitest";
import type { TrainEvent } from "../api/types";
import { eventId, Replay } from "./eventOrder";

const ev = (step: number) => ({ type: "progress", job_id: "j1", step }) as unknown as TrainEvent;
const steps = (evs: TrainEvent[]) => evs.map((e) => (e as { step: number }).step);

describe("the event order", () => {
  it("reads an event's stream id; none when it has no numeric id", () => {
    expect(eventId(new MessageEvent("progress", { data: "{}", lastEventId: "42" }))).toBe(42);
    expect(eventId(new MessageEvent("progress", { data: "{}" }))).toBeNull();
    expect(eventId(new MessageEvent("progress", { data: "{}", lastEventId: "4x" }))).toBeNull();
  });

  it("gives the events after a snapshot's event_seq, keeps them for a later answer older still, and only the newest `cap`", () => {
    const r = new Replay(3);
    r.note(null, ev(0)); // no id: cannot be ordered, not held
    for (const i of [1, 2, 3, 4]) r.note(i, ev(i));
    expect(steps(r.after(2))).toEqual([3, 4]);
    expect(steps(r.after(0))).toEqual([2, 3, 4]); // the oldest went past the cap
    expect(steps(r.after(4))).toEqual([]);
  });

  it("drops what it held when ids go back (a restarted server's new life)", () => {
    const r = new Replay();
    for (const i of [50, 51]) r.note(i, ev(i));
    r.note(1, ev(100));
    expect(steps(r.after(0))).toEqual([100]);
  });
});
