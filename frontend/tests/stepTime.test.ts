// Unit tests of where a step's time goes, as the run page reads it from per-step metrics.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { MetricOut } from "../src/generated/api";
import { StepTimes, stackedColumns } from "../src/stepTime";

function metric(step: number, name: string, value: number): MetricOut {
  return { step, name, value, created_at: "2025-01-01T00:00:00Z" };
}

function step(
  n: number,
  compute: number,
  network: number | null,
  waiting: number,
  averaging: number,
  coordinator: number,
): MetricOut[] {
  return [
    metric(n, "samples_per_s", 99),
    metric(n, "time_compute_s", compute),
    ...(network === null ? [] : [metric(n, "time_network_s", network)]),
    metric(n, "time_waiting_s", waiting),
    metric(n, "time_averaging_s", averaging),
    metric(n, "time_coordinator_s", coordinator),
  ];
}

test("a step's five parts are charted once per step and shared over the newest steps", () => {
  const times = new StepTimes(2);
  // Step 3 comes from a coordinator that did not split the time: it is left out. Step 4's did not
  // split off the network: its network part is 0 (it is in waiting).
  times.add([metric(3, "samples_per_s", 99), ...step(4, 1, null, 1, 1, 1), ...step(5, 2, 0.5, 0.5, 0.5, 0.5)]);
  times.add(step(5, 9, 9, 9, 9, 9)); // a replayed page
  assert.deepEqual(times.series.columns(5), [[4, 5], [1, 2], [0, 0.5], [1, 0.5], [1, 0.5], [1, 0.5]]);
  times.add(step(6, 3, 0, 0, 0.5, 0.5));
  const shares = times.shares();
  assert.ok(shares);
  assert.equal(shares.steps, 2, "only the newest `window` steps");
  assert.deepEqual([shares.firstStep, shares.lastStep, shares.stepSeconds], [5, 6, 4]);
  assert.deepEqual(
    shares.parts.map((p) => [p.label, p.seconds, p.share]),
    [
      ["compute", 2.5, 5 / 8],
      ["network", 0.25, 1 / 16],
      ["waiting on peers", 0.25, 1 / 16],
      ["averaging", 0.5, 1 / 8],
      ["coordinator", 0.5, 1 / 8],
    ],
  );
  assert.equal(new StepTimes().shares(), null, "no step yet: no shares");
});

test("stacked columns are running totals, tallest first", () => {
  assert.deepEqual(
    stackedColumns([
      [4, 5],
      [1, 2],
      [1, null],
      [0.5, 3],
    ]),
    [
      [4, 5],
      [2.5, 5],
      [2, 2],
      [1, 2],
    ],
  );
  assert.deepEqual(stackedColumns([]), [[]]);
});
