// Client-side checks for the create-run form. The server validates again; its 422 messages are
// mapped onto the same fields (see api.ts parseErrorBody).
import type { PresetOut as Preset, RunCreate } from "./types";

export type RunForm = Record<keyof RunCreate, string>;
export type FieldErrors = Partial<Record<keyof RunCreate | string, string>>;

export const DEFAULT_FORM: RunForm = {
  name: "",
  model_preset: "tiny",
  dataset: "python-stdlib",
  num_stages: "2",
  target_batch_size: "64",
  microbatch_size: "8",
  seq_len: "128",
  optimizer: "adamw",
  learning_rate: "0.0003",
  warmup_steps: "10",
  weight_decay: "0.01",
  compression: "none",
  max_steps: "1000",
  seed: "0",
  rebalance: "true",
};

function integer(value: string): number | null {
  const trimmed = value.trim();
  return /^-?\d+$/.test(trimmed) ? Number(trimmed) : null;
}

function decimal(value: string): number | null {
  const trimmed = value.trim();
  if (trimmed === "") return null;
  const n = Number(trimmed);
  return Number.isFinite(n) ? n : null;
}

/** Check the form; returns the request body or the per-field messages. */
export function validateRunForm(
  form: RunForm,
  preset: Preset | undefined,
): { body: RunCreate; errors: null } | { body: null; errors: FieldErrors } {
  const errors: FieldErrors = {};
  const int = (field: keyof RunCreate, min: number, max?: number): number => {
    const n = integer(form[field]);
    if (n === null) errors[field] = "Enter a whole number.";
    else if (n < min) errors[field] = `Must be at least ${min}.`;
    else if (max !== undefined && n > max) errors[field] = `Must be at most ${max}.`;
    return n ?? 0;
  };

  const name = form.name.trim();
  if (!name) errors.name = "Give the run a name.";
  else if (name.length > 200) errors.name = "At most 200 characters.";
  if (!form.model_preset) errors.model_preset = "Choose a model preset.";
  const dataset = form.dataset.trim();
  if (!dataset) errors.dataset = "Name a dataset (python-stdlib or a path on the peers).";

  const numStages = int("num_stages", 1, Math.min(64, preset?.n_layer ?? 64));
  const target = int("target_batch_size", 1);
  const micro = int("microbatch_size", 1);
  if (!errors.microbatch_size && !errors.target_batch_size) {
    if (micro > target) errors.microbatch_size = "Cannot exceed the target batch size.";
    else if (target % micro !== 0)
      errors.target_batch_size = `Must be a multiple of the microbatch size (${micro}).`;
  }
  const seqLen = int("seq_len", 8, preset?.max_seq_len);
  const warmup = int("warmup_steps", 0);
  const seed = int("seed", 0);

  const lr = decimal(form.learning_rate);
  if (lr === null) errors.learning_rate = "Enter a number, e.g. 3e-4.";
  else if (lr <= 0) errors.learning_rate = "Must be greater than 0.";
  else if (lr > 10) errors.learning_rate = "That learning rate is far too large.";
  const wd = decimal(form.weight_decay);
  if (wd === null) errors.weight_decay = "Enter a number.";
  else if (wd < 0) errors.weight_decay = "Cannot be negative.";

  let maxSteps: number | null = null;
  if (form.max_steps.trim() !== "") maxSteps = int("max_steps", 1);

  if (form.optimizer !== "adamw" && form.optimizer !== "sgd") errors.optimizer = "Choose an optimizer.";
  if (!["none", "float16", "int8"].includes(form.compression)) errors.compression = "Choose a compression.";

  if (Object.keys(errors).length > 0) return { body: null, errors };
  return {
    errors: null,
    body: {
      name,
      model_preset: form.model_preset,
      dataset,
      num_stages: numStages,
      target_batch_size: target,
      microbatch_size: micro,
      seq_len: seqLen,
      optimizer: form.optimizer as RunCreate["optimizer"],
      learning_rate: lr as number,
      warmup_steps: warmup,
      weight_decay: wd as number,
      compression: form.compression as RunCreate["compression"],
      max_steps: maxSteps,
      seed,
      rebalance: form.rebalance === "true",
    },
  };
}

/**
 * Place server messages that carry no field location (FastAPI puts a model validator's errors at
 * loc ["body"]) next to the form field they name first, e.g. "seq_len must be at most 256 ...".
 */
export function placeMessages(
  messages: string[],
  fieldNames: string[],
): { fields: FieldErrors; rest: string[] } {
  const fields: FieldErrors = {};
  const rest: string[] = [];
  for (const message of messages) {
    let best: string | null = null;
    let bestAt = Infinity;
    for (const name of fieldNames) {
      const at = message.search(new RegExp(`\\b${name}\\b`));
      if (at >= 0 && at < bestAt) {
        best = name;
        bestAt = at;
      }
    }
    if (best && !fields[best]) fields[best] = message;
    else rest.push(message);
  }
  return { fields, rest };
}
