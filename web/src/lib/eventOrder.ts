/**
 * The order of the status snapshot and the event stream (RELIABILITY 195). Every event of
 * /api/train/events carries its id (`id: <seq>`, MessageEvent.lastEventId), and GET
 * /api/train/status answers `event_seq`: the id of the last event its snapshot reflects (the job
 * service folds an event into the job and logs it under one lock, and reads the snapshot and the
 * id under the same lock). A snapshot fetched before a burst of events and answered after them
 * is older than what those events already showed: the events applied after its `event_seq` are
 * folded onto it again, so the view of a run never goes backwards and what only the snapshot
 * carries (the queue, a status change) is still applied.
 *
 * Ids restart at 1 when the server restarts: an id not above the last one seen starts a new life,
 * and the events held from the old one are dropped (a snapshot of the new life names a job of its
 * own: events of another job are never folded onto it).
 */
import type { TrainEvent } from "../api/types";

/** The stream id of an event (null: none, e.g. an event source that sends no ids). */
export function eventId(msg: MessageEvent): number | null {
  const id = msg.lastEventId;
  return id && /^\d+$/.test(id) ? Number(id) : null;
}

/**
 * The latest events applied, by id, to be folded again onto a snapshot older than them. Bounded:
 * at most `cap` are held (a status request in flight across more events than that gets only the
 * newest `cap` folded on: its progress and samples are still the newest). None is dropped when a
 * snapshot is applied: a later request may be answered with an older event_seq (the server
 * answers requests in parallel), and it needs the events after its own.
 */
export class Replay {
  private held: [number, TrainEvent][] = [];
  private seen = 0;

  constructor(private readonly cap = 2000) {}

  /** An event applied from the stream, with its id (null: none; it cannot be ordered and is not held). */
  note(seq: number | null, ev: TrainEvent): void {
    if (seq == null) return;
    if (seq <= this.seen) this.held = []; // ids went back: a restarted server's new life
    this.seen = seq;
    this.held.push([seq, ev]);
    if (this.held.length > this.cap) this.held.shift();
  }

  /** The events applied after event `seq` (a snapshot's event_seq), oldest first. */
  after(seq: number): TrainEvent[] {
    return this.held.filter(([s]) => s > seq).map(([, ev]) => ev);
  }
}
