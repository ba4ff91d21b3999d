// Client-side checks for the create-run form. The server validates again; its 422 messages are
// mapped onto the same fields (see api.ts parseErrorBody). Defaults and bounds come from the
// server's RunSettings (generated/run-settings.ts); only the checks that depend on the chosen
// preset, and the batch sizes' relation, are written here.
import { percentOf } from "./format";
import type { PresetOut as Preset, RunCreate } from "./generated/api";
import { RUN_SETTINGS, type RunSetting } from "./generated/run-settings";

export type RunForm = Record<keyof RunCreate, string>;
export type FieldErrors = Partial<Record<keyof RunCreate | string, string>>;

/** A setting's schema by name, widened so that absent bounds read as undefined. */
export function runSetting(field: keyof RunCreate): RunSetting {
  return RUN_SETTINGS[field];
}

const FIELDS = Object.keys(RUN_SETTINGS) as (keyof RunCreate)[];

/** Settings that are fractions on the wire but percentages in the form. */
export const PERCENT_FIELDS: ReadonlySet<keyof RunCreate> = new Set(["spot_check_fraction"]);

// A setting without a default (the name; max_steps, whose default is None) starts empty.
export const DEFAULT_FORM: RunForm = Object.fromEntries(
  FIELDS.map((field) => {
    const value = runSetting(field).default;
    if (value === undefined) return [field, ""];
    return [field, PERCENT_FIELDS.has(field) ? percentOf(Number(value)) : String(value)];
  }),
) as RunForm;

/** A percentage setting's schema in percent: its fraction bounds times 100. */
export function percentSetting(field: keyof RunCreate): RunSetting {
  const setting = runSetting(field);
  const scale = (n: number | undefined) => (n === undefined ? undefined : Number(percentOf(n)));
  return {
    ...setting,
    minimum: scale(setting.minimum),
    maximum: scale(setting.maximum),
    exclusiveMinimum: scale(setting.exclusiveMinimum),
    exclusiveMaximum: scale(setting.exclusiveMaximum),
  };
}

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

/** The message for a number outside the setting's bounds; `max` may be tighter than the schema's. */
function outOfBounds(n: number, setting: RunSetting, max = setting.maximum ?? Infinity): string | null {
  if (setting.exclusiveMinimum !== undefined && n <= setting.exclusiveMinimum)
    return `Must be greater than ${setting.exclusiveMinimum}.`;
  if (setting.minimum !== undefined && n < setting.minimum) return `Must be at least ${setting.minimum}.`;
  if (setting.exclusiveMaximum !== undefined && n >= setting.exclusiveMaximum)
    return `Must be less than ${setting.exclusiveMaximum}.`;
  if (n > max) return `Must be at most ${max}.`;
  return null;
}

/** Check the form; returns the request body or the per-field messages. */
export function validateRunForm(
  form: RunForm,
  preset: Preset | undefined,
): { body: RunCreate; errors: null } | { body: null; errors: FieldErrors } {
  const errors: FieldErrors = {};
  const fail = (field: keyof RunCreate, message: string | null): void => {
    if (message !== null) errors[field] = message;
  };
  /** A whole number within the setting's bounds and at most `presetMax` where the preset limits it. */
  const int = (field: keyof RunCreate, presetMax?: number): number => {
    const n = integer(form[field]);
    const setting = runSetting(field);
    const max = Math.min(presetMax ?? Infinity, setting.maximum ?? Infinity);
    fail(field, n === null ? "Enter a whole number." : outOfBounds(n, setting, max));
    return n ?? 0;
  };
  const text = (field: keyof RunCreate, missing: string): string => {
    const value = form[field].trim();
    const maxLength = runSetting(field).maxLength;
    if (!value) errors[field] = missing;
    else if (maxLength !== undefined && value.length > maxLength) errors[field] = `At most ${maxLength} characters.`;
    return value;
  };
  const choice = (field: keyof RunCreate, missing: string): void => {
    if (!runSetting(field).enum?.includes(form[field])) errors[field] = missing;
  };

  const name = text("name", "Give the run a name.");
  const modelPreset = text("model_preset", "Choose a model preset.");
  const dataset = text("dataset", "Choose a dataset (python-stdlib or one you uploaded).");

  const numStages = int("num_stages", preset?.n_layer);
  const target = int("target_batch_size");
  const micro = int("microbatch_size");
  if (!errors.microbatch_size && !errors.target_batch_size) {
    if (micro > target) errors.microbatch_size = "Cannot exceed the target batch size.";
    else if (target % micro !== 0)
      errors.target_batch_size = `Must be a multiple of the microbatch size (${micro}).`;
  }
  const seqLen = int("seq_len", preset?.max_seq_len);
  const warmup = int("warmup_steps");
  const seed = int("seed");

  const lr = decimal(form.learning_rate);
  const lrSetting = runSetting("learning_rate");
  if (lr === null) fail("learning_rate", "Enter a number, e.g. 3e-4.");
  else if (lr > (lrSetting.maximum ?? Infinity)) fail("learning_rate", "That learning rate is far too large.");
  else fail("learning_rate", outOfBounds(lr, lrSetting));
  const wd = decimal(form.weight_decay);
  const wdSetting = runSetting("weight_decay");
  if (wd === null) fail("weight_decay", "Enter a number.");
  else if (wdSetting.minimum === 0 && wd < 0) fail("weight_decay", "Cannot be negative.");
  else fail("weight_decay", outOfBounds(wd, wdSetting));

  const spotCheckPercent = decimal(form.spot_check_fraction);
  if (spotCheckPercent === null) fail("spot_check_fraction", "Enter a percentage, e.g. 2 (0 turns checks off).");
  else if (spotCheckPercent < 0) fail("spot_check_fraction", "Cannot be negative.");
  else fail("spot_check_fraction", outOfBounds(spotCheckPercent, percentSetting("spot_check_fraction")));

  let maxSteps: number | null = null;
  if (form.max_steps.trim() !== "") maxSteps = int("max_steps");

  choice("optimizer", "Choose an optimizer.");
  choice("compression", "Choose a compression.");

  if (Object.keys(errors).length > 0) return { body: null, errors };
  return {
    errors: null,
    body: {
      name,
      model_preset: modelPreset,
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
      spot_check_fraction: (spotCheckPercent as number) / 100,
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
