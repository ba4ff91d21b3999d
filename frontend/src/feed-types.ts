// Mirror of the dashboard websocket frames (/ws/runs/{id}/feed): the pydantic models in
// server/schemas.py that FeedFrame is made of, and the models they nest. Datetimes arrive as ISO
// strings. tests/browser/test_feed_types_drift.py compares every interface here with the model of
// the same name and fails when a field is added, removed or renamed on either side, so keep the
// form `export interface Name [extends Base] {` with one `field: type;` per line.

export type RunStatus = "active" | "paused" | "archived" | "finished";
export type PeerState = "joining" | "active" | "lost" | "left" | "kicked" | "banned";
export type Optimizer = "adamw" | "sgd";
export type Compression = "none" | "float16" | "int8";

export interface RunOut {
  id: number;
  owner_id: number;
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
  status: RunStatus;
  current_step: number;
  created_at: string;
  updated_at: string;
}

export interface RunDetail extends RunOut {
  parameter_count: number;
  peer_counts: Partial<Record<PeerState, number>>;
  latest_loss: number | null;
}

export interface PeerOut {
  id: number;
  run_id: number;
  name: string;
  address: string;
  device: string;
  device_name: string;
  throughput: number;
  queue_length: number;
  samples_done: number;
  stage: number | null;
  state: PeerState;
  last_heartbeat: string | null;
  joined_at: string;
  left_at: string | null;
}

export interface StepOut {
  run_id: number;
  step: number;
  loss: number | null;
  samples_sent: number;
  samples_lost: number;
  /** Samples whose gradients each stage accumulated, indexed by stage. */
  samples_counted: number[];
  duration_s: number;
  created_at: string;
}

export interface EventOut {
  id: number;
  run_id: number | null;
  peer_id: number | null;
  kind: string;
  message: string;
  data: Record<string, unknown>;
  created_at: string;
}

/** First frame after every (re)connection: the whole picture; deltas follow. */
export interface SnapshotFrame {
  type: "snapshot";
  run: RunDetail;
  peers: PeerOut[];
  /** The most recent steps, oldest first. */
  steps: StepOut[];
  /** The most recent events, oldest first. */
  events: EventOut[];
}

export interface RunFrame {
  type: "run";
  run: RunOut;
}

export interface PeerFrame {
  type: "peer";
  peer: PeerOut;
}

export interface StepFrame {
  type: "step";
  step: StepOut;
}

export interface EventFrame {
  type: "event";
  event: EventOut;
}

/** Keepalive while nothing happens; ignored. */
export interface PingFrame {
  type: "ping";
}

export type FeedFrame = SnapshotFrame | RunFrame | PeerFrame | StepFrame | EventFrame | PingFrame;
