// Unit tests of the run health's pure parts: what the banner says, and that rates and ETAs show
// only while a run trains.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { RunHealthOut } from "../src/generated/feed";
import { eventStyle } from "../src/events";
import { bannerText, etaText, healthLabel, isTraining, shownRate, stageHealth } from "../src/health";

const health = (overrides: Partial<RunHealthOut>): RunHealthOut => ({
  state: "training",
  reason: "every stage has a live peer",
  since: null,
  stages: [
    { stage: 0, color: "green", ready: 2, loading: 0, rate: 10, reason: "2 live peers" },
    { stage: 1, color: "red", ready: 0, loading: 0, rate: 0, reason: "no live peer" },
  ],
  ...overrides,
});
const clock = (iso: string) => `<${iso}>`;

test("only a training run shows a rate and an ETA", () => {
  assert.equal(isTraining(health({})), true);
  assert.equal(shownRate(health({}), 134.7), 134.7);
  assert.equal(etaText(health({}), 100, 0.5), "3m 20s");
  assert.equal(etaText(health({}), null, 0.5), "no step limit");
  assert.equal(etaText(health({}), 100, null), "—");
  for (const state of ["paused", "stalled", "waiting", "finished", "archived"] as const) {
    assert.equal(isTraining(health({ state })), false, state);
    assert.equal(shownRate(health({ state }), 134.7), null, state);
    assert.equal(etaText(health({ state }), 100, 0.5), "—", state);
  }
  assert.equal(shownRate(undefined, 134.7), null, "no health known yet: no claim either");
});

test("the banner names the state, the reason and since when; none while training", () => {
  assert.equal(bannerText(health({}), clock), null);
  assert.equal(bannerText(null, clock), null);
  assert.equal(
    bannerText(health({ state: "stalled", reason: "stage 1 has no live peer", since: "2026-11-25T12:03:00Z" }), clock),
    "stalled: stage 1 has no live peer since <2026-11-25T12:03:00Z>",
  );
  assert.equal(
    bannerText(health({ state: "waiting", reason: "no peer has joined yet" }), clock),
    "waiting for peers: no peer has joined yet",
  );
  assert.equal(healthLabel("paused"), "paused");
});

test("a stage's health is found by its number", () => {
  assert.equal(stageHealth(health({}), 1)?.color, "red");
  assert.equal(stageHealth(health({}), 5), null);
  assert.equal(stageHealth(null, 0), null);
});

test("a stall and a recovery stand out in the event log", () => {
  assert.equal(eventStyle("run_stalled").tone, "bad");
  assert.equal(eventStyle("run_recovered").tone, "ok");
});
