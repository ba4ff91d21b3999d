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
