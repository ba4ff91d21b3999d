// The create-run form's pure parts: its messages against the coordinator's (shared cases), and the
// swarm estimate from the coordinator's per-stage memory.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { DEVICE_SIZES, USABLE_SHARE, describePlan, planSwarm, smallestDevice } from "../src/estimate";
import type { PresetOut, RunEstimateOut } from "../src/generated/api";
import { keepActive, parseRemembered, recall, remember, storageKey } from "../src/joinCommands";
import { choices } from "../src/settingMessages";
import { DEFAULT_FORM, validateRunForm, type RunForm } from "../src/validation";

interface Case {
  field: string;
  message: string;
  form: Partial<RunForm>;
}

// npm test runs in frontend/; tests/server/test_run_settings_messages.py posts the same cases.
const shared = JSON.parse(readFileSync("tests/run-settings-messages.json", "utf8")) as {
  preset: PresetOut;
  cases: Case[];
};

test("the form refuses each shared case at its field in the coordinator's words", () => {
  assert.ok(shared.cases.length >= 15);
  for (const { field, message, form } of shared.cases) {
    const result = validateRunForm({ ...DEFAULT_FORM, name: "refused", ...form }, shared.preset);
    assert.ok(result.errors, JSON.stringify(form));
    assert.deepEqual(result.errors, { [field]: message }, JSON.stringify(form));
  }
});

test("choices are listed as pydantic lists a Literal's values", () => {
  assert.equal(choices(["a"]), "Choose 'a'.");
  assert.equal(choices(["a", "b"]), "Choose 'a' or 'b'.");
  assert.equal(choices(["none", "float16", "int8"]), "Choose 'none', 'float16' or 'int8'.");
});

const GiB = 1024 ** 3;

function memory(total: number) {
  return { parameters: total / 4, optimizer: total / 4, gradients: total / 4, activations: total / 4, total };
}

test("a device fits when its usable share holds the bytes", () => {
  assert.equal(smallestDevice(1)?.label, "4 GiB");
  assert.equal(smallestDevice(4 * GiB * USABLE_SHARE)?.label, "4 GiB");
  assert.equal(smallestDevice(4 * GiB * USABLE_SHARE + 1)?.label, "8 GiB");
  assert.equal(smallestDevice(20 * GiB)?.label, "24 GiB");
  const largest = DEVICE_SIZES[DEVICE_SIZES.length - 1];
  assert.equal(smallestDevice(largest.bytes), null, "more than the largest device can use");
});

test("the plan: one peer per stage at least, two recommended, sized by the heaviest stage", () => {
  const estimate: RunEstimateOut = {
    stages: [
      { stage: 0, parameter_count: 1_000_000, memory: memory(2 * GiB) },
      { stage: 1, parameter_count: 800_000, memory: memory(1 * GiB) },
      { stage: 2, parameter_count: 3_000_000, memory: memory(10 * GiB) },
    ],
    any_stage: memory(11 * GiB),
  };
  const plan = planSwarm(estimate, { target_batch_size: 64, microbatch_size: 8 });
  assert.deepEqual(
    plan.stages.map((s) => [s.stage, s.device?.label]),
    [
      [0, "4 GiB"],
      [1, "4 GiB"],
      [2, "12 GiB"],
    ],
  );
  assert.equal(plan.heaviestStage, 2);
  assert.equal(plan.anyStageDevice?.label, "16 GiB");
  assert.equal(plan.minimumPeers, 3);
  assert.equal(plan.recommendedPeers, 6);
  assert.equal(plan.microbatchesPerStep, 8);
  const text = describePlan(plan);
  assert.ok(text.startsWith("Needs at least 3 peers (one per stage), 6 recommended"), text);
  assert.ok(text.includes("11.0 GiB free each (a 16 GiB GPU"), text);
  assert.ok(text.endsWith("a step is 8 microbatches."), text);

  const huge = planSwarm(
    { stages: [{ stage: 0, parameter_count: 1, memory: memory(500 * GiB) }], any_stage: memory(500 * GiB) },
    { target_batch_size: 8, microbatch_size: 8 },
  );
  assert.equal(huge.anyStageDevice, null);
  assert.ok(describePlan(huge).includes("use more stages"));
  assert.ok(describePlan(huge).startsWith("Needs at least 1 peer (one per stage)"));
});

test("join commands are remembered per token, and forgotten once the token is revoked", () => {
  let commands = parseRemembered(null);
  commands = remember(commands, 3, "swarmhub-peer join http://c --token a");
  commands = remember(commands, 5, "swarmhub-peer join http://c --token b");
  assert.equal(recall(commands, 3), "swarmhub-peer join http://c --token a");
  assert.equal(recall(commands, 4), null);
  const stored = JSON.stringify(commands);
  assert.deepEqual(parseRemembered(stored), commands);
  assert.deepEqual(keepActive(commands, [5]), { "5": "swarmhub-peer join http://c --token b" });
  assert.deepEqual(parseRemembered("not json"), {});
  assert.deepEqual(parseRemembered('["x"]'), {});
  assert.deepEqual(parseRemembered('{"7": 1, "x": "y", "8": "ok"}'), { "8": "ok" });
  assert.equal(storageKey(12), "swarmhub.join-commands.12");
});
