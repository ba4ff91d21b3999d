// Model presets as in swarmhub/presets.py. The coordinator has no presets endpoint yet, so the
// form uses this table; if GET /api/presets appears, the form prefers it.
// tests/browser/test_feed_types_drift.py checks every row against swarmhub.presets.PRESETS.

export interface Preset {
  name: string;
  d_model: number;
  n_layer: number;
  n_head: number;
  max_seq_len: number;
  parameter_count: number;
}

export const PRESETS: Preset[] = [
  { name: "tiny", d_model: 64, n_layer: 4, n_head: 4, max_seq_len: 256, parameter_count: 249472 },
  { name: "small", d_model: 256, n_layer: 8, n_head: 8, max_seq_len: 512, parameter_count: 6580992 },
  { name: "medium", d_model: 512, n_layer: 12, n_head: 8, max_seq_len: 1024, parameter_count: 38616320 },
  { name: "base", d_model: 768, n_layer: 12, n_head: 12, max_seq_len: 1024, parameter_count: 86235904 },
  { name: "large", d_model: 1024, n_layer: 24, n_head: 16, max_seq_len: 1024, parameter_count: 303884544 },
  { name: "xl", d_model: 2048, n_layer: 20, n_head: 16, max_seq_len: 1024, parameter_count: 1010315520 },
];

export function parameterCount(name: string): number | null {
  return PRESETS.find((p) => p.name === name)?.parameter_count ?? null;
}
