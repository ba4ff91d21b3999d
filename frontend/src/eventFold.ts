// The event log's shape: events filtered by kind, and runs of routine events (a checkpoint every N
// steps) folded into one line that opens up, so what needs a look is not buried under them.
import type { EventOut } from "./generated/feed";

/** Kinds that happen on a schedule and say "all is well"; several in a row fold into one line. */
export const ROUTINE_KINDS: ReadonlySet<string> = new Set(["checkpoint"]);

export type LogItem =
  | { type: "event"; event: EventOut }
  | { type: "fold"; key: string; kind: string; events: EventOut[]; lastStep: number | null };

/** Each kind present and how many events it has, most frequent first (ties by name). */
export function kindCounts(events: readonly EventOut[]): { kind: string; count: number }[] {
  const counts = new Map<string, number>();
  for (const event of events) counts.set(event.kind, (counts.get(event.kind) ?? 0) + 1);
  return [...counts]
    .map(([kind, count]) => ({ kind, count }))
    .sort((a, b) => b.count - a.count || a.kind.localeCompare(b.kind));
}

function stepOf(event: EventOut): number | null {
  const step = event.data?.step;
  return typeof step === "number" ? step : null;
}

/** Events (newest first) of the `shown` kinds (all when empty), with each run of at least
 * `minFold` consecutive routine events folded; a fold's `lastStep` is its newest event's step. */
export function foldEvents(events: readonly EventOut[], shown: ReadonlySet<string>, minFold = 2): LogItem[] {
  const kept = shown.size === 0 ? events : events.filter((e) => shown.has(e.kind));
  const items: LogItem[] = [];
  let run: EventOut[] = [];
  const flush = () => {
    if (run.length >= minFold) {
      const newest = run[0];
      items.push({ type: "fold", key: `fold-${newest.id}`, kind: newest.kind, events: run, lastStep: stepOf(newest) });
    } else {
      for (const event of run) items.push({ type: "event", event });
    }
    run = [];
  };
  for (const event of kept) {
    if (ROUTINE_KINDS.has(event.kind) && (run.length === 0 || run[0].kind === event.kind)) {
      run.push(event);
      continue;
    }
    flush();
    if (ROUTINE_KINDS.has(event.kind)) run.push(event);
    else items.push({ type: "event", event });
  }
  flush();
  return items;
}

/** "12 checkpoints, last at step 240". */
export function foldTitle(item: Extract<LogItem, { type: "fold" }>): string {
  const noun = item.kind === "checkpoint" ? "checkpoints" : `${item.kind} events`;
  const last = item.lastStep === null ? "" : `, last at step ${item.lastStep}`;
  return `${item.events.length} ${noun}${last}`;
}
