// Unit tests of the charts, event log and run comparison's pure parts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { describeSummary, summarize } from "../src/chartSummary";
import { csvFileName, toCsv } from "../src/csv";
import { ROUTINE_KINDS, foldEvents, foldTitle, kindCounts } from "../src/eventFold";
import { formatBytesSI, humanizeMessage } from "../src/eventText";
import type { EventOut, StepOut } from "../src/generated/feed";
import { overlayColumns, sparklinePath } from "../src/overlay";
import { diffSettings, parseRunIds } from "../src/settingsDiff";
import { ema, smoothColumns } from "../src/smoothing";
import { bottleneckStage, stageRates, stepStageRates } from "../src/stageRates";
import { MetricSeries } from "../src/stepMetrics";
import type { MetricOut } from "../src/generated/api";

test("ema with alpha 1 is the identity and keeps gaps", () => {
  assert.deepEqual(ema([1, null, 3], 1), [1, null, 3]);
});

test("ema is bias-corrected: a constant series stays constant from the first point", () => {
  assert.deepEqual(ema([5, 5, 5, 5], 0.1).map((v) => Number((v as number).toFixed(12))), [5, 5, 5, 5]);
});

test("ema smooths a step and carries over gaps", () => {
  const out = ema([0, 10, null, 10], 0.5) as number[];
  assert.equal(out[0], 0);
  // weights: 0.5 and 0.25 on 10 and 0: (0.5*10 + 0.25*0) / 0.75
  assert.equal(Number(out[1].toFixed(6)), Number((5 / 0.75).toFixed(6)));
  assert.equal(out[2], null);
  assert.ok(out[3] > out[1] && out[3] < 10);
  assert.deepEqual(smoothColumns([[0, 1], [2, 2]], 0.3)[0], [0, 1]);
});

test("ema refuses a weight outside (0, 1]", () => {
  assert.throws(() => ema([1], 0));
  assert.throws(() => ema([1], 1.5));
});

test("toCsv quotes what needs quoting and leaves nulls empty", () => {
  const csv = toCsv(["step", "loss, smoothed", 'say "hi"'], [[0, 1], [2.5, null], ["a\nb", "c"]]);
  assert.equal(csv, 'step,"loss, smoothed","say ""hi"""\r\n0,2.5,"a\nb"\r\n1,,c\r\n');
  assert.throws(() => toCsv(["one"], []));
  assert.equal(csvFileName("Loss (run 3)"), "loss-run-3.csv");
  assert.equal(csvFileName("!!"), "chart.csv");
});

test("summarize gives latest, range and trend", () => {
  const falling = summarize([0, 1, 2, 3, 4, 5], [9, 8, null, 5, 3, 2]);
  assert.deepEqual(falling, { points: 5, latest: 2, latestX: 5, min: 2, max: 9, trend: "falling" });
  assert.equal(summarize([0, 1, 2, 3], [1, 1, 1.001, 1]).trend, "flat");
  assert.equal(summarize([0, 1, 2, 3], [1, 2, 3, 4]).trend, "rising");
  assert.equal(summarize([0, 1], [1, 2]).trend, null, "too few points for a trend");
  assert.equal(summarize([], []).points, 0);
  assert.equal(
    describeSummary("loss", falling, (v) => v.toFixed(1), (x) => `step ${x}`),
    "loss: latest 2.0 at step 5, min 2.0, max 9.0, falling (5 points).",
  );
  assert.equal(describeSummary("loss", summarize([], []), String, String), "loss: no data yet.");
});

test("event messages get human units", () => {
  assert.equal(formatBytesSI(3_012_000), "3.0 MB");
  assert.equal(formatBytesSI(999), "999 B");
  assert.equal(formatBytesSI(1_500_000_000), "1.5 GB");
  assert.equal(
    humanizeMessage("checkpoint of step 240 complete (2 stages, 3012000 bytes)"),
    "checkpoint of step 240 complete (2 stages, 3.0 MB)",
  );
  assert.equal(
    humanizeMessage("step 7: samples lost per stage {1: 32, 3: 8} of 64 sent"),
    "step 7: samples lost per stage stage 1: 32, stage 3: 8 of 64 sent",
  );
  assert.equal(humanizeMessage("run 'x' created by alice"), "run 'x' created by alice");
});

function event(id: number, kind: string, step?: number): EventOut {
  return {
    id,
    run_id: 1,
    peer_id: null,
    kind,
    message: `${kind} ${id}`,
    data: step === undefined ? {} : { step },
    created_at: "2026-11-25T12:00:00Z",
  };
}

test("consecutive checkpoints fold into one item; other events break the run", () => {
  assert.ok(ROUTINE_KINDS.has("checkpoint"));
  // Newest first, as the log holds them.
  const events = [
    event(9, "checkpoint", 240),
    event(8, "checkpoint", 220),
    event(7, "checkpoint", 200),
    event(6, "peer_lost"),
    event(5, "checkpoint", 180),
    event(4, "rebalance"),
    event(3, "checkpoint", 160),
    event(2, "checkpoint", 140),
  ];
  const items = foldEvents(events, new Set());
  assert.deepEqual(
    items.map((i) => (i.type === "fold" ? `fold:${i.events.map((e) => e.id).join("+")}` : `event:${i.event.id}`)),
    ["fold:9+8+7", "event:6", "event:5", "event:4", "fold:3+2"],
  );
  const first = items[0];
  assert.ok(first.type === "fold");
  assert.equal(foldTitle(first), "3 checkpoints, last at step 240");
});

test("filtering by kind happens before folding, so filtered-out events do not break a fold", () => {
  const events = [event(4, "checkpoint", 30), event(3, "peer_lost"), event(2, "checkpoint", 20), event(1, "run_created")];
  const items = foldEvents(events, new Set(["checkpoint"]));
  assert.equal(items.length, 1);
  assert.ok(items[0].type === "fold" && items[0].events.length === 2);
  assert.deepEqual(foldEvents(events, new Set(["peer_lost"])).map((i) => i.type === "event" && i.event.id), [3]);
  assert.deepEqual(kindCounts(events), [
    { kind: "checkpoint", count: 2 },
    { kind: "peer_lost", count: 1 },
    { kind: "run_created", count: 1 },
  ]);
});

test("settings diff lists differing settings first", () => {
  const rows = diffSettings(
    [
      { learning_rate: 0.003, num_stages: 2, seed: 0 },
      { learning_rate: 0.001, num_stages: 2 },
    ],
    ["num_stages", "learning_rate", "seed"],
  );
  assert.deepEqual(rows, [
    { name: "learning_rate", values: [0.003, 0.001], differs: true },
    { name: "seed", values: [0, null], differs: true },
    { name: "num_stages", values: [2, 2], differs: false },
  ]);
  assert.ok(!diffSettings([{ name: "a" }, { name: "b" }]).some((r) => r.name === "name"));
});

test("run ids from a compare route's query", () => {
  assert.deepEqual(parseRunIds("#/compare?runs=3,1,x,3,0, 2"), [3, 1, 2]);
  assert.deepEqual(parseRunIds("#/compare"), []);
});

test("overlay lays curves on the union of their steps", () => {
  const columns = overlayColumns([
    [{ step: 0, loss: 5 }, { step: 10, loss: 3 }],
    [{ step: 5, loss: 4 }, { step: 10, loss: 2 }],
  ]);
  assert.deepEqual(columns, [[0, 5, 10], [5, null, 3], [null, 4, 2]]);
  assert.equal(sparklinePath([1], 10, 10), "");
  assert.equal(sparklinePath([2, null, 0], 100, 10), "M0.0,0.0 L100.0,10.0");
});

function step(counted: number[], sent: number, lost: number, duration: number): StepOut {
  return {
    run_id: 1,
    step: 0,
    loss: 1,
    samples_sent: sent,
    samples_lost: lost,
    samples_counted: counted,
    duration_s: duration,
    created_at: "2026-11-25T12:00:00Z",
  };
}

test("stage rates are what the steps counted, never above the run's own rate", () => {
  assert.deepEqual(stepStageRates(step([32, 24], 32, 8, 2), 2), [12, 12]);
  assert.deepEqual(stepStageRates(step([32], 32, 0, 0), 2), [null, null]);
  const steps = [step([32, 32], 32, 0, 2), step([32, 16], 32, 16, 2)];
  // Claims say 100 and 10 samples/s; the run did 48 samples in 4 s.
  const rates = stageRates(steps, 2, new Map([[0, 100], [1, 10]]));
  assert.deepEqual(rates.map((r) => r.served), [12, 12]);
  for (const r of rates) assert.ok((r.served as number) <= 48 / 4);
  assert.equal(bottleneckStage(rates), 1, "stage 1 works at 120% of its claim, stage 0 at 12%");
  const empty = stageRates(steps, 3, new Map([[0, 100], [1, 10]]));
  assert.equal(bottleneckStage(empty), 2, "a stage with no live peer is the bottleneck");
  assert.equal(bottleneckStage(stageRates([], 2, new Map())), null);
});

test("MetricSeries keeps steps that have every named metric, with their time", () => {
  const metric = (step: number, name: string, value: number): MetricOut => ({
    step,
    name,
    value,
    created_at: `2026-11-25T12:00:0${step}Z`,
  });
  const series = new MetricSeries(["retries", "wire_bytes"]);
  series.add([metric(0, "retries", 1), metric(0, "wire_bytes", 500), metric(1, "retries", 2), metric(2, "samples_per_s", 3)]);
  series.add([metric(0, "retries", 9), metric(0, "wire_bytes", 9)]);
  const { data, times } = series.columns();
  assert.deepEqual(data, [[0], [1], [500]]);
  assert.deepEqual(times, [Date.parse("2026-11-25T12:00:00Z") / 1000]);
});
