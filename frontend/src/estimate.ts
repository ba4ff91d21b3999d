// What a run asks of its swarm, from the coordinator's memory estimate per stage
// (GET /api/presets/{name}/estimate, swarmhub/resources.py) and the run's batch settings: how many
// peers, and of which size. Pure: the create-run form shows it as its fields change.
import { formatBytes } from "./format";
import type { RunEstimateOut } from "./generated/api";

const GiB = 1024 ** 3;

export interface DeviceSize {
  readonly label: string;
  readonly bytes: number;
}

/** Common accelerator memory sizes; a machine's RAM serves the same way for a CPU peer. */
export const DEVICE_SIZES: readonly DeviceSize[] = [4, 8, 12, 16, 24, 40, 48, 80, 141].map((gib) => ({
  label: `${gib} GiB`,
  bytes: gib * GiB,
}));

/** Share of a device a peer can count on: the framework, its CUDA context and fragmentation take the rest. */
export const USABLE_SHARE = 0.85;

/** The smallest common size that holds `bytes`, or null when none does. */
export function smallestDevice(bytes: number): DeviceSize | null {
  return DEVICE_SIZES.find((size) => size.bytes * USABLE_SHARE >= bytes) ?? null;
}

export interface StagePlan {
  readonly stage: number;
  readonly parameterCount: number;
  readonly bytes: number;
  readonly device: DeviceSize | null;
}

export interface SwarmPlan {
  readonly stages: readonly StagePlan[];
  /** The heaviest stage: what a peer needs to be given whichever stage the swarm lacks. */
  readonly heaviestStage: number;
  /** What a peer checks against its free memory before it joins: enough for any stage. */
  readonly anyStageBytes: number;
  readonly anyStageDevice: DeviceSize | null;
  /** One peer per stage: fewer and the pipeline has a gap. */
  readonly minimumPeers: number;
  /** Two per stage: a stage survives one peer leaving, and spot checks have a second peer to ask. */
  readonly recommendedPeers: number;
  readonly microbatchesPerStep: number;
}

export function planSwarm(
  estimate: RunEstimateOut,
  settings: { target_batch_size: number; microbatch_size: number },
): SwarmPlan {
  const stages = estimate.stages.map((s) => ({
    stage: s.stage,
    parameterCount: s.parameter_count,
    bytes: s.memory.total,
    device: smallestDevice(s.memory.total),
  }));
  const heaviest = stages.reduce((a, b) => (b.bytes > a.bytes ? b : a), stages[0]);
  return {
    stages,
    heaviestStage: heaviest?.stage ?? 0,
    anyStageBytes: estimate.any_stage.total,
    anyStageDevice: smallestDevice(estimate.any_stage.total),
    minimumPeers: stages.length,
    recommendedPeers: 2 * stages.length,
    microbatchesPerStep: Math.max(1, Math.floor(settings.target_batch_size / settings.microbatch_size)),
  };
}

/** The plan in one sentence for the form. */
export function describePlan(plan: SwarmPlan): string {
  const size = plan.anyStageDevice
    ? `${formatBytes(plan.anyStageBytes)} free each (a ${plan.anyStageDevice.label} GPU, or a CPU machine with that much memory)`
    : `${formatBytes(plan.anyStageBytes)} free each, more than the largest common GPU holds: use more stages`;
  return (
    `Needs at least ${plan.minimumPeers} peer${plan.minimumPeers === 1 ? "" : "s"} (one per stage), ` +
    `${plan.recommendedPeers} recommended (two per stage), with ${size}; ` +
    `a step is ${plan.microbatchesPerStep} microbatch${plan.microbatchesPerStep === 1 ? "" : "es"}.`
  );
}
