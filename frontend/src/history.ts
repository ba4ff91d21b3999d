// Chart history older than the feed's snapshot (which carries only the most recent steps).
// Short runs are read whole; long ones are sampled in evenly spaced windows, so opening the page
// of a run with a million steps costs a few requests and a few thousand points, not the lot.
import { call, client } from "./api";
import type { StepOut } from "./generated/api";

const PAGE = 1000;
const FULL_LIMIT = 5000;
const WINDOWS = 20;
const WINDOW_STEPS = 100;

function steps(runId: number, after: number, limit: number): Promise<StepOut[]> {
  return call(client.GET("/api/runs/{run_id}/steps", { params: { path: { run_id: runId }, query: { after, limit } } }));
}

/** Steps numbered below `before`, oldest first: all of them, or a sample when there are many. */
export async function loadStepHistory(runId: number, before: number): Promise<StepOut[]> {
  if (before <= 0) return [];
  const found = new Map<number, StepOut>();
  const keep = (steps: StepOut[]) => {
    for (const step of steps) if (step.step < before) found.set(step.step, step);
  };
  if (before <= FULL_LIMIT) {
    let after = -1;
    while (after < before - 1) {
      const page = await steps(runId, after, PAGE);
      keep(page);
      if (page.length < PAGE) break;
      after = page[page.length - 1].step;
    }
  } else {
    const windows = await Promise.all(
      Array.from({ length: WINDOWS }, (_, k) => {
        const after = Math.floor((k * before) / WINDOWS) - 1;
        return steps(runId, after, WINDOW_STEPS);
      }),
    );
    for (const steps of windows) keep(steps);
  }
  return [...found.values()].sort((a, b) => a.step - b.step);
}
