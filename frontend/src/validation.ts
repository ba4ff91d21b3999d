// Client-side checks for the create-run form. The server validates again and says the same words
// at the same fields (settingMessages.ts; api.ts parseErrorBody maps its 422). Defaults and bounds
// come from the server's RunSettings (generated/run-settings.ts); only the checks that depend on the
// chosen preset, and the batch sizes' relation, are written here.
import { percentOf } from "./format";
import type { PresetOut as Preset, RunCreate } from "./generated/api";
import { RUN_SETTINGS, type RunSetting } from "./generated/run-settings";
import * as say from "./settingMessages";

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

/** The message for a number outside the setting's bounds (in percent for a percent setting). */
function outOfBounds(n: number, setting: RunSetting, percent = false): string | null {
  if (setting.exclusiveMinimum !== undefined && n <= setting.exclusiveMinimum)
    return say.greaterThan(setting.exclusiveMinimum, percent);
  if (setting.minimum !== undefined && n < setting.minimum) return say.atLeast(setting.minimum, percent);
  if (setting.exclusiveMaximum !== undefined && n >= setting.exclusiveMaximum)
    return say.lessThan(setting.exclusiveMaximum, percent);
  if (setting.maximum !== undefined && n > setting.maximum) return say.atMost(setting.maximum, percent);
  return null;
}

/** Check the form; returns the request body or the per-field messages, in the server's words. */
export function validateRunForm(
  form: RunForm,
  preset: Preset | undefined,
): { body: RunCreate; errors: null } | { body: null; errors: FieldErrors } {
  const errors: FieldErrors = {};
  const fail = (field: keyof RunCreate, message: string | null): void => {
    if (message !== null && !errors[field]) errors[field] = message;
  };
  const int = (field: keyof RunCreate): number => {
    const n = integer(form[field]);
    fail(field, n === null ? say.WHOLE_NUMBER : outOfBounds(n, runSetting(field)));
    return n ?? 0;
  };
  const num = (field: keyof RunCreate): number => {
    const percent = PERCENT_FIELDS.has(field);
    const n = decimal(form[field]);
    fail(field, n === null ? say.NUMBER : outOfBounds(n, percent ? percentSetting(field) : runSetting(field), percent));
    return n ?? 0;
  };
  const text = (field: keyof RunCreate): string => {
    const value = form[field].trim();
    const maxLength = runSetting(field).maxLength;
    if (!value) fail(field, say.MISSING[field] ?? "Required.");
    else if (maxLength !== undefined && value.length > maxLength) fail(field, say.tooLong(maxLength));
    return value;
  };
  const choice = (field: keyof RunCreate): void => {
    const options = runSetting(field).enum ?? [];
    if (!options.includes(form[field])) fail(field, say.choices(options));
  };

  const name = text("name");
  const modelPreset = text("model_preset");
  const dataset = text("dataset");

  const numStages = int("num_stages");
  const target = int("target_batch_size");
  const micro = int("microbatch_size");
  const seqLen = int("seq_len");
  // The checks against the preset and between settings, as the server's RunSettings makes them.
  if (preset) {
    if (!errors.num_stages && numStages > preset.n_layer)
      fail("num_stages", say.stagesOverBlocks(preset.n_layer, preset.name));
    if (!errors.seq_len && seqLen > preset.max_seq_len)
      fail("seq_len", say.seqLenOver(preset.max_seq_len, preset.name));
    else if (
      !errors.seq_len &&
      !errors.microbatch_size &&
      micro * seqLen * preset.d_model > preset.max_activation_elements
    )
      fail("microbatch_size", say.activationsTooLarge(micro, seqLen, preset.d_model, preset.max_activation_elements));
  }
  if (!errors.microbatch_size && !errors.target_batch_size && target % micro !== 0)
    fail("target_batch_size", say.notAMultiple(micro));
  const warmup = int("warmup_steps");
  const seed = int("seed");
  const lr = num("learning_rate");
  const wd = num("weight_decay");
  const spotCheckPercent = num("spot_check_fraction");

  let maxSteps: number | null = null;
  if (form.max_steps.trim() !== "") maxSteps = int("max_steps");

  choice("optimizer");
  choice("compression");

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
      learning_rate: lr,
      warmup_steps: warmup,
      weight_decay: wd,
      compression: form.compression as RunCreate["compression"],
      max_steps: maxSteps,
      seed,
      rebalance: form.rebalance === "true",
      spot_check_fraction: spotCheckPercent / 100,
    },
  };
}

/**
 * Place server messages that carry no field location (FastAPI puts a model validator's errors at
 * loc ["body"]) next to the form field they name first, e.g. "seq_len must be at most 256 ...".
 */
export function placeMessages(messages: string[], fieldNames: string[]): { fields: FieldErrors; rest: string[] } {
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
