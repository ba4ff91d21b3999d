// Unit tests of the webhooks panel's pure parts.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { DeliveryOut } from "../src/generated/api";
import { WEBHOOK_KINDS, deliveryStatus, webhookUrlProblem } from "../src/webhooks";

const delivery = (overrides: Partial<DeliveryOut>): DeliveryOut => ({
  id: 1,
  webhook_id: 1,
  event_id: 9,
  event_kind: "run_finished",
  event_message: "reached max_steps=10",
  state: "pending",
  attempts: 0,
  status_code: null,
  error: "",
  next_attempt_at: "2026-11-25T12:00:00Z",
  delivered_at: null,
  created_at: "2026-11-25T11:59:00Z",
  ...overrides,
});

test("webhook URLs must be http or https with a host", () => {
  assert.equal(webhookUrlProblem("https://alerts.example.com/hook?x=1"), null);
  assert.equal(webhookUrlProblem(" http://127.0.0.1:9000/ "), null);
  assert.ok(/Enter the URL/.test(webhookUrlProblem("") ?? ""));
  assert.ok(/Not a URL/.test(webhookUrlProblem("alerts.example.com") ?? ""));
  assert.ok(/Only http/.test(webhookUrlProblem("ftp://example.com/") ?? ""));
  assert.ok(/Only http/.test(webhookUrlProblem("javascript:alert(1)") ?? ""));
  assert.ok(/2000/.test(webhookUrlProblem(`https://example.com/${"a".repeat(2000)}`) ?? ""));
});

test("the kinds offered are the four the coordinator sends", () => {
  assert.deepEqual(
    WEBHOOK_KINDS.map((k) => k.kind),
    ["run_stalled", "run_recovered", "run_finished", "checkpoint"],
  );
});

test("a delivery's status line says where it stands", () => {
  const now = new Date("2026-11-25T11:59:40Z").getTime();
  assert.deepEqual(deliveryStatus(delivery({}), now), { text: "sending…", tone: "pending" });
  assert.deepEqual(deliveryStatus(delivery({ attempts: 1, status_code: 500, error: "HTTP 500 Internal Server Error" }), now), {
    text: "1 attempt failed (HTTP 500 Internal Server Error); next try in 20s",
    tone: "pending",
  });
  assert.deepEqual(
    deliveryStatus(delivery({ state: "delivered", attempts: 2, status_code: 200, next_attempt_at: null }), now),
    { text: "delivered (HTTP 200, 2 attempts)", tone: "ok" },
  );
  assert.deepEqual(
    deliveryStatus(delivery({ state: "failed", attempts: 8, error: "ConnectError: refused", next_attempt_at: null }), now),
    { text: "gave up after 8 attempts: ConnectError: refused", tone: "bad" },
  );
  assert.equal(deliveryStatus(delivery({ state: "cancelled", attempts: 1, next_attempt_at: null }), now).tone, "muted");
  // A retry already due is not "in -5s".
  assert.ok(/in 0s$/.test(deliveryStatus(delivery({ attempts: 1, status_code: 503 }), now + 60_000).text));
});
