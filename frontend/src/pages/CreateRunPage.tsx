import { useEffect, useState, type FormEvent, type ReactNode } from "react";
import { ApiError, call, client, errorMessage } from "../api";
import { DatasetPicker } from "../components/DatasetPicker";
import { describePlan, planSwarm, type SwarmPlan } from "../estimate";
import { formatBytes, formatCount } from "../format";
import type { PresetOut, RunCreate } from "../generated/api";
import { useLoad } from "../hooks/useLoad";
import { navigate } from "../router";
import {
  DEFAULT_FORM,
  percentSetting,
  placeMessages,
  runSetting,
  validateRunForm,
  type FieldErrors,
  type RunForm,
} from "../validation";

const FIELD_NAMES = Object.keys(DEFAULT_FORM);

/** Settings most runs leave at their defaults: in the collapsed "Advanced" section. */
export const ADVANCED_FIELDS: ReadonlySet<string> = new Set([
  "optimizer",
  "learning_rate",
  "warmup_steps",
  "weight_decay",
  "compression",
  "rebalance",
  "spot_check_fraction",
  "seed",
]);

/** Waits this long after the last keystroke before asking the coordinator for an estimate. */
const ESTIMATE_DELAY_MS = 250;

/** The swarm the form's settings need, once the settings it depends on check out. */
function useSwarmPlan(form: RunForm, preset: PresetOut | undefined): { plan: SwarmPlan | null; error: string } {
  const [result, setResult] = useState<{
    plan: SwarmPlan | null;
    error: string;
  }>({ plan: null, error: "" });
  const checked = validateRunForm({ ...form, name: form.name || "estimate" }, preset);
  const shapeErrors = ["num_stages", "microbatch_size", "seq_len", "target_batch_size", "optimizer"].filter(
    (field) => checked.errors?.[field],
  );
  const shape =
    preset && shapeErrors.length === 0
      ? {
          name: preset.name,
          num_stages: Number(form.num_stages),
          microbatch_size: Number(form.microbatch_size),
          seq_len: Number(form.seq_len),
          optimizer: form.optimizer as RunCreate["optimizer"],
          target_batch_size: Number(form.target_batch_size),
        }
      : null;
  const key = JSON.stringify(shape);
  useEffect(() => {
    if (shape === null) {
      setResult({ plan: null, error: "" });
      return;
    }
    let current = true;
    const timer = window.setTimeout(() => {
      call(
        client.GET("/api/presets/{name}/estimate", {
          params: {
            path: { name: shape.name },
            query: {
              num_stages: shape.num_stages,
              microbatch_size: shape.microbatch_size,
              seq_len: shape.seq_len,
              optimizer: shape.optimizer,
            },
          },
        }),
      ).then(
        (estimate) => current && setResult({ plan: planSwarm(estimate, shape), error: "" }),
        (e: unknown) => current && setResult({ plan: null, error: errorMessage(e) }),
      );
    }, ESTIMATE_DELAY_MS);
    return () => {
      current = false;
      window.clearTimeout(timer);
    };
    // The shape's JSON stands for the shape: a new object each render must not refetch.
  }, [key]);
  return result;
}

function SwarmEstimate({ plan, error }: { plan: SwarmPlan | null; error: string }) {
  return (
    <div className="run-estimate" data-testid="run-estimate" aria-live="polite">
      <h2>What the run needs</h2>
      {error ? (
        <p className="error">Could not estimate: {error}</p>
      ) : !plan ? (
        <p className="muted">Fill in the preset, stages and batch sizes to see the memory each stage needs.</p>
      ) : (
        <>
          <p data-testid="run-estimate-summary">{describePlan(plan)}</p>
          <table className="table compact">
            <thead>
              <tr>
                <th>Stage</th>
                <th>Parameters</th>
                <th>Memory per peer</th>
                <th>Fits</th>
              </tr>
            </thead>
            <tbody>
              {plan.stages.map((stage) => (
                <tr key={stage.stage} data-testid="run-estimate-stage">
                  <td>
                    {stage.stage}
                    {stage.stage === plan.heaviestStage && plan.stages.length > 1 ? " (heaviest)" : ""}
                  </td>
                  <td>{formatCount(stage.parameterCount)}</td>
                  <td>{formatBytes(stage.bytes)}</td>
                  <td>{stage.device ? `${stage.device.label} GPU` : "no common GPU"}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <p className="muted">
            Estimates from the coordinator (parameters, optimizer state, gradients and one microbatch&apos;s
            activations); a peer refuses the run before allocating anything when its free memory is short.
          </p>
        </>
      )}
    </div>
  );
}

// Number inputs take their bounds from RunSettings (`setting`: the same in other units, such as a
// percentage), tightened where the chosen preset allows less (the form is noValidate: they only
// steer the spinner; validateRunForm checks).
function bounds(name: keyof RunCreate, presetMax?: number, setting = runSetting(name)): Record<string, string> {
  const { minimum, maximum } = setting;
  const max = Math.min(presetMax ?? Infinity, maximum ?? Infinity);
  const attributes: Record<string, string> = {};
  if (minimum !== undefined) attributes.min = String(minimum);
  if (max !== Infinity) attributes.max = String(max);
  return attributes;
}

function Field(props: {
  name: keyof RunCreate;
  label: string;
  errors: FieldErrors;
  hint?: string;
  children: ReactNode;
}) {
  const error = props.errors[props.name];
  // Without a hint of its own, a field explains itself with its setting's docstring (RunSettings).
  const hint = props.hint ?? runSetting(props.name).description;
  return (
    <div className={error ? "field has-error" : "field"}>
      <label htmlFor={`f-${props.name}`}>{props.label}</label>
      {props.children}
      {hint && !error && <div className="hint">{hint}</div>}
      {error && (
        <div className="field-error" data-field={props.name} id={`e-${props.name}`} role="alert">
          {error}
        </div>
      )}
    </div>
  );
}

export function CreateRunPage() {
  const [form, setForm] = useState<RunForm>(DEFAULT_FORM);
  const [errors, setErrors] = useState<FieldErrors>({});
  const [formError, setFormError] = useState("");
  // The coordinator's presets (GET /api/presets); null while loading.
  const { data: presets, error: presetsError } = useLoad(() => call(client.GET("/api/presets")), []);
  const presetError = presetsError && `Could not load model presets: ${presetsError}`;
  const [busy, setBusy] = useState(false);
  const [advancedOpen, setAdvancedOpen] = useState(false);

  const preset = presets?.find((p) => p.name === form.model_preset);
  const estimate = useSwarmPlan(form, preset);

  /** Errors are shown where they are: a refused advanced setting opens its section. */
  function showErrors(next: FieldErrors) {
    setErrors(next);
    if (Object.keys(next).some((field) => next[field] && ADVANCED_FIELDS.has(field))) setAdvancedOpen(true);
  }

  function set<K extends keyof RunForm>(key: K, value: string) {
    setForm((f) => ({ ...f, [key]: value }));
    if (errors[key]) setErrors((e) => ({ ...e, [key]: undefined }));
  }

  const input = (name: keyof RunCreate, type = "text", extra: Record<string, string> = {}) => (
    <input
      id={`f-${name}`}
      name={name}
      type={type}
      value={form[name]}
      aria-invalid={errors[name] ? true : undefined}
      aria-describedby={errors[name] ? `e-${name}` : undefined}
      onChange={(e) => set(name, e.target.value)}
      {...extra}
    />
  );

  async function submit(event: FormEvent) {
    event.preventDefault();
    setFormError("");
    const checked = validateRunForm(form, preset);
    if (checked.errors) {
      showErrors(checked.errors);
      return;
    }
    setErrors({});
    setBusy(true);
    try {
      const run = await call(client.POST("/api/runs", { body: checked.body }));
      navigate(`/runs/${run.id}`);
    } catch (e) {
      if (e instanceof ApiError && (Object.keys(e.fields).length > 0 || e.unplaced.length > 0)) {
        // 422: errors with a field loc go next to that field; model-level ones next to the field
        // they name; whatever is left (or names an unknown field) above the button.
        const placed = placeMessages(e.unplaced, FIELD_NAMES);
        const fields: FieldErrors = { ...placed.fields };
        const rest = [...placed.rest];
        for (const [field, message] of Object.entries(e.fields)) {
          if (FIELD_NAMES.includes(field)) fields[field] = message;
          else rest.push(`${field}: ${message}`);
        }
        showErrors(fields);
        setFormError(rest.length > 0 ? rest.join("; ") : "The coordinator rejected some fields.");
      } else {
        setFormError(errorMessage(e));
      }
    } finally {
      setBusy(false);
    }
  }

  return (
    <section>
      <h1>New run</h1>
      <form className="card run-form" noValidate onSubmit={(e) => void submit(e)}>
        <Field name="name" label="Name" errors={errors}>
          {input("name", "text", { placeholder: "my-first-swarm" })}
        </Field>
        <Field
          name="model_preset"
          label="Model preset"
          errors={errors}
          hint={
            presetError ||
            (preset
              ? `${formatCount(preset.parameter_count)} parameters · ${preset.n_layer} blocks · d_model ${preset.d_model}`
              : presets === null
                ? "loading presets…"
                : undefined)
          }
        >
          <select
            id="f-model_preset"
            name="model_preset"
            value={form.model_preset}
            onChange={(e) => set("model_preset", e.target.value)}
          >
            {presets === null ? (
              // Until the list arrives (or if it cannot), the chosen name alone; the server checks it.
              <option value={form.model_preset}>{form.model_preset}</option>
            ) : (
              presets.map((p) => (
                <option key={p.name} value={p.name}>
                  {p.name} — {formatCount(p.parameter_count)} parameters
                </option>
              ))
            )}
          </select>
        </Field>
        <Field
          name="dataset"
          label="Dataset"
          errors={errors}
          hint="the bundled corpus, a dataset you uploaded, or upload one: peers download it from the coordinator"
        >
          <DatasetPicker
            value={form.dataset}
            invalid={Boolean(errors.dataset)}
            describedBy={errors.dataset ? "e-dataset" : undefined}
            onChange={(value) => set("dataset", value)}
          />
        </Field>
        <Field name="num_stages" label="Pipeline stages" errors={errors}>
          {input("num_stages", "number", bounds("num_stages", preset?.n_layer))}
        </Field>
        <Field name="target_batch_size" label="Target batch size" errors={errors} hint="samples per global step">
          {input("target_batch_size", "number", bounds("target_batch_size"))}
        </Field>
        <Field name="microbatch_size" label="Microbatch size" errors={errors}>
          {input("microbatch_size", "number", bounds("microbatch_size"))}
        </Field>
        <Field
          name="seq_len"
          label="Sequence length"
          errors={errors}
          hint={preset?.max_seq_len ? `at most ${preset.max_seq_len} for ${preset.name}` : undefined}
        >
          {input("seq_len", "number", bounds("seq_len", preset?.max_seq_len))}
        </Field>
        <Field name="max_steps" label="Max steps" errors={errors} hint="empty: run until stopped">
          {input("max_steps", "number", bounds("max_steps"))}
        </Field>
        <SwarmEstimate plan={estimate.plan} error={estimate.error} />
        <details
          className="advanced-settings"
          data-testid="advanced-settings"
          open={advancedOpen}
          onToggle={(e) => setAdvancedOpen(e.currentTarget.open)}
        >
          <summary>Advanced settings: optimizer, learning rate, compression, rebalancing, spot checks, seed</summary>
          <div className="run-form-section">
            <Field name="optimizer" label="Optimizer" errors={errors}>
              <select
                id="f-optimizer"
                name="optimizer"
                value={form.optimizer}
                onChange={(e) => set("optimizer", e.target.value)}
              >
                <option value="adamw">AdamW</option>
                <option value="sgd">SGD</option>
              </select>
            </Field>
            <Field name="learning_rate" label="Learning rate" errors={errors}>
              {input("learning_rate", "text", { inputMode: "decimal" })}
            </Field>
            <Field name="warmup_steps" label="Warm-up steps" errors={errors}>
              {input("warmup_steps", "number", bounds("warmup_steps"))}
            </Field>
            <Field name="weight_decay" label="Weight decay" errors={errors}>
              {input("weight_decay", "text", { inputMode: "decimal" })}
            </Field>
            <Field
              name="compression"
              label="Compression"
              errors={errors}
              hint="of activations and gradients between peers"
            >
              <select
                id="f-compression"
                name="compression"
                value={form.compression}
                onChange={(e) => set("compression", e.target.value)}
              >
                <option value="none">none (exact)</option>
                <option value="float16">float16</option>
                <option value="int8">int8 (blockwise 8-bit)</option>
              </select>
            </Field>
            <Field name="rebalance" label="Rebalancing" errors={errors} hint="move peers toward the bottleneck stage">
              <select
                id="f-rebalance"
                name="rebalance"
                value={form.rebalance}
                onChange={(e) => set("rebalance", e.target.value)}
              >
                <option value="true">on</option>
                <option value="false">off</option>
              </select>
            </Field>
            <Field
              name="spot_check_fraction"
              label="Spot checks, % of stage calls"
              errors={errors}
              hint="costs about that share of extra compute; catches peers returning wrong results (0: off)"
            >
              {input("spot_check_fraction", "number", {
                ...bounds("spot_check_fraction", undefined, percentSetting("spot_check_fraction")),
                step: "any",
              })}
            </Field>
            <Field name="seed" label="Seed" errors={errors}>
              {input("seed", "number", bounds("seed"))}
            </Field>
          </div>
        </details>
        {formError && (
          <p className="error form-error" role="alert">
            {formError}
          </p>
        )}
        <div className="actions">
          <button type="submit" disabled={busy}>
            {busy ? "Creating…" : "Create run"}
          </button>
          <a href="#/">Cancel</a>
        </div>
      </form>
    </section>
  );
}
