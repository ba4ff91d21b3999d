// Unit tests of the dashboard's pure parts, run by `npm test` with Node's own test runner.
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseErrorBody } from "../src/api";
import { CheckCosts, wholeSteps } from "../src/checks";
import { formatBytes, formatSeconds, linkRows, percentOf } from "../src/format";
import { EVENT_STYLES, eventStyle } from "../src/events";
import { backoffDelay } from "../src/feed";
import { expiresIn, invitationUrl } from "../src/invite";
import { parseRoute } from "../src/router";
import type { MetricOut, PresetOut } from "../src/generated/api";
import { RUN_SETTINGS } from "../src/generated/run-settings";
import { BoundedSeries, StepRate, formatDuration } from "../src/series";
import { DEFAULT_FORM, PERCENT_FIELDS, placeMessages, validateRunForm } from "../src/validation";

test("BoundedSeries stays within its limits over a very long run", () => {
  const series = new BoundedSeries(100, 50);
  for (let step = 0; step < 100_000; step++) series.push({ step, values: [1 / (step + 1), step] });
  assert.ok(series.size <= 150, `size ${series.size}`);
  const [steps, loss] = series.columns(2);
  assert.equal(steps.length, series.size);
  assert.equal(steps[steps.length - 1], 99_999, "the newest point is kept exactly");
  assert.ok((steps[0] as number) < 2_000, "old history is still represented");
  for (let i = 1; i < steps.length; i++) assert.ok((steps[i] as number) > (steps[i - 1] as number));
  assert.equal(loss[loss.length - 1], 1 / 100_000);
});

test("BoundedSeries ignores replayed steps and keeps gaps as null", () => {
  const series = new BoundedSeries(10, 10);
  assert.equal(series.push({ step: 3, values: [null] }), true);
  assert.equal(series.push({ step: 3, values: [1] }), false);
  assert.equal(series.push({ step: 2, values: [1] }), false);
  assert.deepEqual(series.columns(1), [[3], [null]]);
});

test("BoundedSeries.prepend puts history in front and stays bounded", () => {
  const series = new BoundedSeries(20, 10);
  for (let step = 500; step < 510; step++) series.push({ step, values: [step] });
  series.prepend(Array.from({ length: 500 }, (_, step) => ({ step, values: [step] })));
  const [steps] = series.columns(1);
  assert.ok(series.size <= 30);
  assert.equal(steps[steps.length - 1], 509);
  assert.ok((steps[0] as number) < 100);
});

test("StepRate measures recent steps per second", () => {
  const rate = new StepRate(5);
  assert.equal(rate.rate(), null);
  for (let step = 0; step < 10; step++) rate.add(step, step * 2000);
  assert.equal(rate.rate(), 0.5);
  assert.equal(formatDuration(3725), "1h 2m");
});

test("reconnect backoff grows exponentially up to the cap", () => {
  const delays = Array.from({ length: 12 }, (_, attempt) => backoffDelay(attempt, 500, 30_000));
  assert.ok(delays[0] >= 400 && delays[0] <= 600);
  assert.ok(delays[3] >= 3200 && delays[3] <= 4800);
  for (const delay of delays) assert.ok(delay <= 36_000);
  assert.ok(delays[11] >= 24_000);
  assert.ok(backoffDelay(10_000, 500, 30_000) <= 36_000, "no overflow for huge attempt counts");
});

test("422 bodies map to fields; model-level messages go to the field they name", () => {
  const error = parseErrorBody(422, {
    detail: [
      { loc: ["body", "seq_len"], msg: "Input should be greater than or equal to 8" },
      { loc: ["body"], msg: "Value error, target_batch_size must be a multiple of microbatch_size" },
    ],
  });
  assert.equal(error.fields.seq_len, "Input should be greater than or equal to 8");
  assert.deepEqual(error.unplaced, ["target_batch_size must be a multiple of microbatch_size"]);
  const placed = placeMessages(error.unplaced, Object.keys(DEFAULT_FORM));
  assert.deepEqual(placed.fields, { target_batch_size: error.unplaced[0] });
  assert.equal(parseErrorBody(409, { detail: "run is archived" }).message, "run is archived");
});

test("client-side run validation", () => {
  // As GET /api/presets describes "tiny".
  const tiny: PresetOut = {
    name: "tiny",
    parameter_count: 249472,
    d_model: 64,
    n_layer: 4,
    n_head: 4,
    max_seq_len: 256,
    max_activation_elements: 1 << 24,
  };
  const ok = validateRunForm({ ...DEFAULT_FORM, name: "r" }, tiny);
  assert.ok(ok.body);
  // The untouched form sends the server's own defaults (swarmhub/run_settings.py).
  assert.equal(ok.body.seq_len, RUN_SETTINGS.seq_len.default);
  assert.equal(ok.body.learning_rate, RUN_SETTINGS.learning_rate.default);
  assert.equal(ok.body.target_batch_size, RUN_SETTINGS.target_batch_size.default);
  assert.equal(ok.body.max_steps, null, "max_steps has no default: train until archived");
  const bad = validateRunForm(
    { ...DEFAULT_FORM, name: "", num_stages: "9", microbatch_size: "5", seq_len: "300", learning_rate: "x" },
    tiny,
  );
  assert.ok(bad.errors);
  assert.deepEqual(Object.keys(bad.errors).sort(), [
    "learning_rate",
    "name",
    "num_stages",
    "seq_len",
    "target_batch_size",
  ]);
});

test("run validation takes its bounds from RunSettings and the preset's from the preset", () => {
  const big: PresetOut = {
    name: "big",
    parameter_count: 1,
    d_model: 64,
    n_layer: 1000,
    n_head: 4,
    max_seq_len: 4096,
    max_activation_elements: 1 << 30,
  };
  const check = (changes: Partial<typeof DEFAULT_FORM>) => {
    const result = validateRunForm({ ...DEFAULT_FORM, name: "r", ...changes }, big);
    assert.ok(result.errors, JSON.stringify(changes));
    return result.errors;
  };
  const stages = RUN_SETTINGS.num_stages;
  assert.equal(check({ num_stages: "0" }).num_stages, `Must be at least ${stages.minimum}.`);
  // The preset has more blocks than the schema allows stages: the schema's maximum wins.
  assert.equal(check({ num_stages: String(stages.maximum + 1) }).num_stages, `Must be at most ${stages.maximum}.`);
  assert.equal(check({ seq_len: "7" }).seq_len, `Must be at least ${RUN_SETTINGS.seq_len.minimum}.`);
  assert.equal(check({ seq_len: "4097" }).seq_len, "Must be at most 4096 for preset 'big'.");
  assert.equal(check({ learning_rate: "0" }).learning_rate, "Must be greater than 0.");
  assert.equal(
    check({ learning_rate: String(RUN_SETTINGS.learning_rate.maximum * 2) }).learning_rate,
    `Must be at most ${RUN_SETTINGS.learning_rate.maximum}.`,
  );
  assert.equal(check({ weight_decay: "-1" }).weight_decay, "Must be at least 0.");
  assert.equal(check({ max_steps: "0" }).max_steps, `Must be at least ${RUN_SETTINGS.max_steps.minimum}.`);
  assert.equal(check({ name: "x".repeat(201) }).name, `At most ${RUN_SETTINGS.name.maxLength} characters.`);
  assert.equal(check({ optimizer: "lion" }).optimizer, "Choose 'adamw' or 'sgd'.");
  assert.equal(check({ spot_check_fraction: "101" }).spot_check_fraction, "Must be at most 100%.");
  assert.equal(check({ spot_check_fraction: "-1" }).spot_check_fraction, "Must be at least 0%.");
  assert.equal(check({ spot_check_fraction: "two" }).spot_check_fraction, "Enter a number.");
  for (const [field, setting] of Object.entries(RUN_SETTINGS)) {
    const key = field as keyof typeof DEFAULT_FORM;
    const value = !("default" in setting)
      ? ""
      : PERCENT_FIELDS.has(key)
        ? percentOf(Number(setting.default))
        : String(setting.default);
    assert.equal(DEFAULT_FORM[key], value, field);
  }
});

test("spot checks are a percentage in the form and a fraction in the request", () => {
  const tiny: PresetOut = {
    name: "tiny",
    parameter_count: 1,
    d_model: 64,
    n_layer: 4,
    n_head: 4,
    max_seq_len: 256,
    max_activation_elements: 1 << 24,
  };
  assert.equal(DEFAULT_FORM.spot_check_fraction, "2", "the server's default of 0.02, as a percentage");
  const body = (percent: string) =>
    validateRunForm({ ...DEFAULT_FORM, name: "r", spot_check_fraction: percent }, tiny).body;
  assert.equal(body("2")?.spot_check_fraction, RUN_SETTINGS.spot_check_fraction.default);
  assert.equal(body("0")?.spot_check_fraction, 0);
  assert.equal(body("100")?.spot_check_fraction, 1);
  assert.equal(body(" 0.5 ")?.spot_check_fraction, 0.005);
  assert.equal(percentOf(0.07), "7");
});

test("formatBytes uses binary units", () => {
  assert.equal(formatBytes(512), "512 B");
  assert.equal(formatBytes(2048), "2.00 KiB");
  assert.equal(formatBytes(3 * 1024 * 1024 + 512 * 1024), "3.50 MiB");
  assert.equal(formatBytes(20 * 1024 * 1024 * 1024), "20.0 GiB");
  assert.equal(formatBytes(null), "—");
});

test("swarm events each have their own icon and a non-plain tone", () => {
  const kinds = ["rebalance", "stage_restored", "stage_reinitialized", "samples_lost", "checkpoint"];
  const icons = kinds.map((k) => eventStyle(k).icon);
  assert.equal(new Set(icons).size, kinds.length, `icons ${icons.join(" ")}`);
  for (const kind of kinds) {
    assert.ok(kind in EVENT_STYLES, kind);
    assert.ok(eventStyle(kind).tone !== "plain", kind);
  }
  assert.equal(eventStyle("peer_joined").tone, "plain");
  assert.equal(eventStyle("peer_joined").label, "peer_joined");
});

test("formatSeconds writes human units", () => {
  assert.equal(formatSeconds(0), "0 s");
  assert.equal(formatSeconds(0.0123), "12.3 ms");
  assert.equal(formatSeconds(2.345), "2.3 s");
  assert.equal(formatSeconds(119.6), "1 min 59 s");
  assert.equal(formatSeconds(7320), "2 h 2 min");
  assert.equal(formatSeconds(null), "—");
});

test("spot-check events: a faulty peer stands out from a lost one and from a mere mismatch", () => {
  const kinds = [
    "spot_check_mismatch",
    "spot_check_referee",
    "peer_faulty",
    "spot_check_unfounded",
    "spot_check_unresolved",
    "peer_banned",
  ];
  for (const kind of kinds) assert.ok(kind in EVENT_STYLES, kind);
  assert.equal(eventStyle("peer_faulty").tone, "fault");
  assert.ok(eventStyle("peer_lost").tone !== "fault");
  assert.equal(eventStyle("spot_check_mismatch").tone, "warn");
  assert.equal(eventStyle("spot_check_unfounded").tone, "ok");
  // Bringing in the owner's trusted verifier is routine: informational, not an alarm.
  assert.equal(eventStyle("spot_check_referee").tone, "plain");
  assert.ok(eventStyle("spot_check_referee").icon !== eventStyle("peer_joined").icon);
});

function metric(step: number, name: string, value: number): MetricOut {
  return { step, name, value, created_at: "2025-01-01T00:00:00Z" };
}

test("spot-check costs add up whole steps once, against the pipeline's own traffic", () => {
  const costs = new CheckCosts(10, 10);
  const step = (n: number, bytes: number, seconds: number) => [
    metric(n, "samples_per_s", 99),
    metric(n, "wire_bytes", 1000),
    metric(n, "spot_check_calls", 2),
    metric(n, "spot_check_bytes", bytes),
    metric(n, "spot_check_seconds", seconds),
  ];
  costs.add([...step(4, 20, 0.5), ...step(5, 30, 0.25)]);
  costs.add(step(5, 30, 0.25)); // a replayed page
  assert.deepEqual(costs.totals(), { firstStep: 4, lastStep: 5, calls: 4, bytes: 50, seconds: 0.75, wireBytes: 2000 });
  assert.equal(costs.extraTraffic(), 0.025);
  assert.deepEqual(costs.series.columns(2), [
    [4, 5],
    [20, 30],
    [0.5, 0.25],
  ]);
  assert.equal(new CheckCosts().extraTraffic(), null, "no traffic yet: no share");
});

test("a full page of metrics leaves its last, possibly partial, step for the next read", () => {
  const rows = [metric(1, "a", 0), metric(1, "b", 0), metric(2, "a", 0)];
  assert.deepEqual(wholeSteps(rows, 3), { rows: rows.slice(0, 2), after: 1, more: true });
  assert.deepEqual(wholeSteps(rows, 4), { rows, after: 2, more: false });
  assert.deepEqual(wholeSteps([], 4), { rows: [], after: null, more: false });
  const oneStep = [metric(7, "a", 0), metric(7, "b", 0)];
  assert.deepEqual(wholeSteps(oneStep, 2), { rows: oneStep, after: 7, more: true });
});

test("link rates are listed fastest first, named where the peer is known", () => {
  const names = new Map([
    [3, "gpu-a"],
    [5, ""],
  ]);
  assert.deepEqual(linkRows({ "5": 2048, "3": 10 * 1024 * 1024, "9": 2048 }, names), [
    { peerId: 3, name: "gpu-a", rate: "10.0 MiB/s" },
    { peerId: 5, name: "peer 5", rate: "2.00 KiB/s" },
    { peerId: 9, name: "peer 9", rate: "2.00 KiB/s" },
  ]);
  assert.deepEqual(linkRows({}, names), []);
});

test("invitation links open the invite page, whatever else is in the hash", () => {
  const url = invitationUrl({ origin: "https://hub.example", pathname: "/" }, "Ab_c-9");
  assert.equal(url, "https://hub.example/#/invite/Ab_c-9");
  assert.deepEqual(parseRoute(new URL(url).hash), { page: "invite", token: "Ab_c-9" });
  assert.deepEqual(parseRoute("#/invite/"), { page: "not-found", path: "/invite/" });
  assert.deepEqual(parseRoute("#/invite/a/b"), { page: "not-found", path: "/invite/a/b" });
});

test("expiresIn says coarsely how long a link has left", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  assert.equal(expiresIn("2026-01-04T00:00:00Z", now), "in 3 days");
  assert.equal(expiresIn("2026-01-01T05:00:00Z", now), "in 5 hours");
  assert.equal(expiresIn("2026-01-01T00:01:00Z", now), "in 1 minute");
  assert.equal(expiresIn("2025-12-31T00:00:00Z", now), "in 0 minutes");
});
