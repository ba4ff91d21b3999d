// A run's webhooks: add one (its signing secret is shown once), turn it off and on, remove it, and
// read the delivery log. The coordinator signs and sends; docs/operations.md tells receivers how to check.
import { useEffect, useState } from "react";
import { call, client, errorMessage } from "../api";
import { formatTime } from "../format";
import type { WebhookCreated } from "../generated/api";
import { useLoad } from "../hooks/useLoad";
import { WEBHOOK_KINDS, type WebhookKind, deliveryStatus, webhookUrlProblem } from "../webhooks";
import { CopyButton } from "./JoinPanel";

const LOG_REFRESH_MS = 5000;
const TONE_BADGE = { ok: "badge-active", pending: "badge-paused", bad: "badge-lost", muted: "" } as const;

/** `refreshKey` changes when the page learns of an event a webhook may be sent; the log reloads. */
export function WebhooksPanel({ runId, refreshKey }: { runId: number; refreshKey: number }) {
  const path = { params: { path: { run_id: runId } } };
  const hooks = useLoad(() => call(client.GET("/api/runs/{run_id}/webhooks", path)), [runId]);
  const log = useLoad(
    () => call(client.GET("/api/runs/{run_id}/webhooks/deliveries", { params: { ...path.params, query: { limit: 20 } } })),
    [runId, refreshKey],
  );
  const [url, setUrl] = useState("");
  const [kinds, setKinds] = useState<WebhookKind[]>(WEBHOOK_KINDS.map((k) => k.kind));
  const [created, setCreated] = useState<WebhookCreated | null>(null);
  const [actionError, setActionError] = useState("");
  const [busy, setBusy] = useState(false);
  const error = actionError || hooks.error || log.error;

  // While something is still owed, follow its retries.
  const owed = (log.data ?? []).some((d) => d.state === "pending");
  useEffect(() => {
    if (!owed) return;
    const timer = window.setInterval(log.reload, LOG_REFRESH_MS);
    return () => window.clearInterval(timer);
  }, [owed, log.reload]);

  function toggleKind(kind: WebhookKind, on: boolean) {
    setKinds((current) => (on ? [...current, kind] : current.filter((k) => k !== kind)));
  }

  async function act(work: () => Promise<void>) {
    setBusy(true);
    setActionError("");
    try {
      await work();
    } catch (e) {
      setActionError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  function add() {
    const problem = webhookUrlProblem(url) ?? (kinds.length === 0 ? "Pick at least one kind of event." : null);
    if (problem) {
      setActionError(problem);
      return;
    }
    void act(async () => {
      setCreated(await call(client.POST("/api/runs/{run_id}/webhooks", { ...path, body: { url: url.trim(), kinds } })));
      setUrl("");
      hooks.reload();
    });
  }

  function setEnabled(webhookId: number, enabled: boolean) {
    void act(async () => {
      await call(
        client.PATCH("/api/runs/{run_id}/webhooks/{webhook_id}", {
          params: { path: { run_id: runId, webhook_id: webhookId } },
          body: { enabled },
        }),
      );
      hooks.reload();
      log.reload();
    });
  }

  function remove(webhookId: number) {
    void act(async () => {
      await call(
        client.DELETE("/api/runs/{run_id}/webhooks/{webhook_id}", {
          params: { path: { run_id: runId, webhook_id: webhookId } },
        }),
      );
      if (created?.id === webhookId) setCreated(null);
      hooks.reload();
      log.reload();
    });
  }

  const listed = hooks.data ?? [];
  const deliveries = log.data ?? [];
  return (
    <div className="webhooks" data-testid="webhooks">
      <div className="card-head">
        <h2>Webhooks</h2>
      </div>
      <p className="muted">
        The coordinator POSTs a signed JSON message to each URL when the run stalls, recovers, finishes or saves a
        checkpoint, and retries with growing waits until the receiver answers 2xx.
      </p>
      {created && (
        <div className="notice" data-testid="webhook-secret">
          Signing secret of webhook #{created.id}, shown only now (the X-SwarmHub-Signature header is an HMAC-SHA256
          keyed with it):
          <div className="join-command">
            <code>{created.secret}</code>
            <CopyButton text={created.secret} />
          </div>
        </div>
      )}
      <div className="issue-row">
        <input
          aria-label="Webhook URL"
          placeholder="https://alerts.example.com/swarmhub"
          maxLength={2000}
          value={url}
          onChange={(e) => setUrl(e.target.value)}
        />
        <button type="button" onClick={add} disabled={busy}>
          Add webhook
        </button>
      </div>
      <div className="webhook-kinds">
        <span className="muted">Send: </span>
        {WEBHOOK_KINDS.map(({ kind, label }) => (
          <label className="inline" key={kind}>
            <input
              type="checkbox"
              aria-label={`send ${label} events`}
              checked={kinds.includes(kind)}
              onChange={(e) => toggleKind(kind, e.target.checked)}
            />
            {label}
          </label>
        ))}
      </div>
      {error && (
        <p className="error" data-testid="webhook-error">
          {error}
        </p>
      )}
      {listed.length > 0 && (
        <table className="table compact" data-testid="webhook-list">
          <thead>
            <tr>
              <th>URL</th>
              <th>Events</th>
              <th>On</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {listed.map((hook) => (
              <tr key={hook.id} data-testid="webhook" data-id={hook.id}>
                <td>
                  #{hook.id} <code>{hook.url}</code>
                </td>
                <td>{hook.kinds.map((k) => WEBHOOK_KINDS.find((w) => w.kind === k)?.label ?? k).join(", ")}</td>
                <td>
                  <input
                    type="checkbox"
                    aria-label={`webhook ${hook.id} enabled`}
                    checked={hook.enabled}
                    disabled={busy}
                    onChange={(e) => setEnabled(hook.id, e.target.checked)}
                  />
                </td>
                <td>
                  <button type="button" className="danger small" disabled={busy} onClick={() => remove(hook.id)}>
                    Remove
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {listed.length > 0 && deliveries.length === 0 && <p className="muted">Nothing sent yet.</p>}
      {deliveries.length > 0 && (
        <table className="table compact" data-testid="webhook-deliveries">
          <thead>
            <tr>
              <th>Event</th>
              <th>Webhook</th>
              <th>Status</th>
              <th>Since</th>
            </tr>
          </thead>
          <tbody>
            {deliveries.map((d) => {
              const status = deliveryStatus(d);
              return (
                <tr key={d.id} data-testid="webhook-delivery" data-state={d.state} data-attempts={d.attempts}>
                  <td title={d.event_message}>{d.event_kind}</td>
                  <td>#{d.webhook_id}</td>
                  <td>
                    <span className={`badge ${TONE_BADGE[status.tone]}`}>{d.state}</span> {status.text}
                  </td>
                  <td>{formatTime(d.delivered_at ?? d.created_at)}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </div>
  );
}
