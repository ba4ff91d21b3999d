// Unit tests of the checkpoint samples' pure parts.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { SamplesOut } from "../src/generated/api";
import { hfModelUrl, samplesCaption, samplesPending } from "../src/samples";

const out = (overrides: Partial<SamplesOut>): SamplesOut => ({
  run_id: 3,
  step: 40,
  status: "ready",
  detail: null,
  loss: 2.3456,
  samples: { step: 40, max_new_tokens: 64, temperature: 0, seed: 0, samples: [{ prompt: "The ", text: "cat" }] },
  ...overrides,
});

test("the HF download is the checkpoint's hf route", () => {
  assert.equal(hfModelUrl(3, 40), "/api/runs/3/checkpoints/40/hf");
});

test("only a missing or generating answer is asked again", () => {
  assert.equal(samplesPending(null), true);
  assert.equal(samplesPending(out({ status: "generating", samples: null })), true);
  for (const status of ["ready", "failed", "unavailable"] as const) assert.equal(samplesPending(out({ status })), false);
});

test("the caption names the step, its loss and the decoding", () => {
  assert.equal(samplesCaption(out({})), "Step 40 · loss 2.346 · greedy, 64 tokens per prompt");
  const sampled = out({ samples: { step: 40, max_new_tokens: 32, temperature: 0.8, seed: 5, samples: [] } });
  assert.equal(samplesCaption(sampled), "Step 40 · loss 2.346 · temperature 0.8, seed 5, 32 tokens per prompt");
  assert.equal(samplesCaption(out({ status: "generating", samples: null, loss: null })), "Step 40 · loss — · generating samples…");
  assert.equal(
    samplesCaption(out({ status: "unavailable", samples: null, detail: "torch is not installed" })),
    "Step 40 · loss 2.346 · no samples: torch is not installed",
  );
});
