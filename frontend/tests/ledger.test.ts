// Unit tests of the contribution ledger's pure parts.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ParticipantContribution } from "../src/generated/api";
import { contributionPath, rankBy, shareOfCounted, work } from "../src/ledger";
import { parseRoute } from "../src/router";

const row = (
  participant: string,
  overrides: Partial<ParticipantContribution>,
): ParticipantContribution => ({
  participant_id: 1,
  participant,
  peers: 1,
  samples_trained: 0,
  calls_served: 0,
  samples_served: 0,
  compute_s: 0,
  bytes_moved: 0,
  uptime_s: 0,
  failures: 0,
  steps: 0,
  ...overrides,
});

test("the board ranks by samples trained and served, then by the column picked", () => {
  const rows = [
    row("ann", {
      samples_trained: 10,
      samples_served: 5,
      failures: 2,
      compute_s: 9,
    }),
    row("bob", {
      samples_trained: 4,
      samples_served: 40,
      failures: 0,
      compute_s: 1,
    }),
    row("cy", {
      samples_trained: 10,
      samples_served: 5,
      failures: 1,
      compute_s: 3,
    }),
  ];
  assert.equal(work(rows[1]), 44);
  assert.deepEqual(
    rankBy(rows, null).map((r) => r.participant),
    ["bob", "ann", "cy"],
  );
  assert.deepEqual(
    rankBy(rows, "compute_s").map((r) => r.participant),
    ["ann", "cy", "bob"],
  );
  // Failures: fewest first.
  assert.deepEqual(
    rankBy(rows, "failures").map((r) => r.participant),
    ["bob", "cy", "ann"],
  );
  assert.deepEqual(
    rows.map((r) => r.participant),
    ["ann", "bob", "cy"],
    "the input is left as it was",
  );
});

test("a share of the run's counted samples", () => {
  assert.equal(shareOfCounted(48, 192), "25%");
  assert.equal(shareOfCounted(0, 0), "—");
});

test("the link a peer prints opens the contribution page", () => {
  const token = "Ab_c-9".repeat(7);
  assert.deepEqual(parseRoute(`#${contributionPath(token)}`), {
    page: "contribution",
    token,
  });
});
