// Pure parts of the checkpoint samples shown on the run page (components/SamplesPanel.tsx).
import { formatNumber } from "./format";
import type { SamplesOut } from "./generated/api";

/** How long to wait before asking again: samples are generated on the first request, in the background. */
export const SAMPLES_POLL_MS = 2000;

export function hfModelUrl(runId: number, step: number): string {
  return `/api/runs/${runId}/checkpoints/${step}/hf`;
}

export function samplesUrlPath(runId: number, step: number): string {
  return `/api/runs/${runId}/checkpoints/${step}/samples`;
}

/** Whether the answer is final (ready, failed, unavailable) or the page should ask again. */
export function samplesPending(out: SamplesOut | null): boolean {
  return out === null || out.status === "generating";
}

/** The line above the samples: which checkpoint, its loss, and how the text was decoded. */
export function samplesCaption(out: SamplesOut): string {
  const loss = out.loss === null || out.loss === undefined ? "loss —" : `loss ${formatNumber(out.loss)}`;
  const head = `Step ${out.step} · ${loss}`;
  if (out.status === "generating") return `${head} · generating samples…`;
  if (out.status !== "ready" || !out.samples) return `${head} · no samples: ${out.detail ?? out.status}`;
  const { temperature, seed, max_new_tokens: tokens } = out.samples;
  const decoding = temperature === 0 ? "greedy" : `temperature ${temperature}, seed ${seed}`;
  return `${head} · ${decoding}, ${tokens} tokens per prompt`;
}
