// REST shapes of the coordinator (server/schemas.py). Websocket frames and the models they carry
// (RunOut, RunDetail, PeerOut, StepOut, EventOut) live in feed-types.ts.
import type { Compression, Optimizer } from "./feed-types";

export type { Compression, Optimizer, PeerState, RunStatus } from "./feed-types";
export type Role = "owner" | "admin";

export interface User {
  id: number;
  username: string;
  role: Role;
  disabled: boolean;
  created_at: string;
}

export interface RunCreate {
  name: string;
  model_preset: string;
  dataset: string;
  num_stages: number;
  target_batch_size: number;
  microbatch_size: number;
  seq_len: number;
  optimizer: Optimizer;
  learning_rate: number;
  warmup_steps: number;
  weight_decay: number;
  compression: Compression;
  max_steps: number | null;
  seed: number;
  rebalance: boolean;
}

export interface TokenOut {
  id: number;
  run_id: number;
  label: string;
  created_at: string;
  revoked_at: string | null;
}

export interface TokenIssued extends TokenOut {
  token: string;
  join_command: string;
}

/** GET /api/presets (server/schemas.py PresetOut; the drift test checks the fields). */
export interface PresetOut {
  name: string;
  parameter_count: number;
  d_model: number;
  n_layer: number;
  n_head: number;
  max_seq_len: number;
}

/** One stage file of a checkpoint (server/routes/checkpoints.py CheckpointStageOut). */
export interface CheckpointStageOut {
  stage: number;
  bytes: number;
  sha256: string;
  created_at: string;
}

/** GET /api/runs/{id}/checkpoints: one step, newest first (CheckpointStepOut). */
export interface CheckpointStepOut {
  run_id: number;
  step: number;
  num_stages: number;
  complete: boolean;
  bytes: number;
  stages: CheckpointStageOut[];
}

/** POST /api/runs/{id}/checkpoints (CheckpointRequested). */
export interface CheckpointRequested {
  run_id: number;
  current_step: number;
}
