import { useState } from "react";
import { call, client, errorMessage } from "../api";
import { formatTime } from "../format";
import type { TokenCreate, TokenIssued } from "../generated/api";
import { useLoad } from "../hooks/useLoad";

export function CopyButton({ text }: { text: string }) {
  const [copied, setCopied] = useState(false);
  async function copy() {
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      // Clipboard API needs a secure context; fall back to selecting a hidden textarea.
      const area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    setCopied(true);
    window.setTimeout(() => setCopied(false), 1500);
  }
  return (
    <button type="button" className="secondary" onClick={() => void copy()}>
      {copied ? "Copied" : "Copy"}
    </button>
  );
}

/** Marks a verifier token, or a peer that joined with one (a trusted referee of spot checks). */
export function VerifierBadge() {
  return (
    <span
      className="badge badge-verifier"
      data-testid="verifier-badge"
      title="Verifier: the run owner's own machine, trusted to referee spot-check disputes."
    >
      verifier
    </span>
  );
}

/** Issue join tokens, show the one-line join command, revoke tokens. */
export function JoinPanel({ runId }: { runId: number }) {
  const loaded = useLoad(
    () => call(client.GET("/api/runs/{run_id}/tokens", { params: { path: { run_id: runId } } })),
    [runId],
  );
  const tokens = loaded.data ?? [];
  const [created, setCreated] = useState<TokenIssued | null>(null);
  const [actionError, setActionError] = useState("");
  const [busy, setBusy] = useState(false);
  const [label, setLabel] = useState("");
  const [maxPeers, setMaxPeers] = useState("");
  const [verifier, setVerifier] = useState(false);
  const error = actionError || loaded.error;

  async function issue() {
    setBusy(true);
    setActionError("");
    try {
      setCreated(
        await call(
          client.POST("/api/runs/{run_id}/tokens", {
            params: { path: { run_id: runId } },
            // Without a number the coordinator applies its own default.
            body: {
              label: label.trim(),
              verifier,
              ...(maxPeers.trim() ? { max_peers: Number(maxPeers) } : {}),
            } as TokenCreate,
          }),
        ),
      );
      setLabel("");
      setMaxPeers("");
      // Unticked after each issue so that a token for someone else is never a verifier by accident.
      setVerifier(false);
      loaded.reload();
    } catch (e) {
      setActionError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  async function revoke(id: number) {
    setActionError("");
    try {
      await call(
        client.DELETE("/api/runs/{run_id}/tokens/{token_id}", {
          params: { path: { run_id: runId, token_id: id } },
        }),
      );
      if (created?.id === id) setCreated(null);
      loaded.reload();
    } catch (e) {
      setActionError(errorMessage(e));
    }
  }

  const active = tokens.filter((t) => !t.revoked_at);
  return (
    <div className="join-panel" data-testid="join-panel">
      <p className="muted">
        Anyone with the command below can add a machine to this run. The token is shown only once.
      </p>
      {created && (
        <div className="join-command">
          <code data-testid="join-command">{created.join_command}</code>
          <CopyButton text={created.join_command} />
        </div>
      )}
      <div className="issue-row">
        <input
          aria-label="Token label"
          placeholder="label (optional), e.g. lab-gpu-3"
          maxLength={100}
          value={label}
          onChange={(e) => setLabel(e.target.value)}
        />
        <input
          aria-label="Peers this token may register"
          title="How many machines may join with this token (give each participant their own token)"
          placeholder="peers (default 32)"
          type="number"
          min={1}
          max={10000}
          value={maxPeers}
          onChange={(e) => setMaxPeers(e.target.value)}
        />
        <button type="button" onClick={() => void issue()} disabled={busy}>
          {created ? "Issue another token" : "Issue join token"}
        </button>
      </div>
      <label className="inline">
        <input type="checkbox" checked={verifier} onChange={(e) => setVerifier(e.target.checked)} />
        verifier token (for my own machines: trusted referees)
      </label>
      <p className="muted verifier-note">
        Peers joining with a verifier token are trusted to referee spot checks: when the two peers of a stage
        disagree, one is brought to that stage to settle it. Use it only on machines you run yourself; never
        give one away.
      </p>
      {error && <p className="error">{error}</p>}
      {active.length > 0 && (
        <table className="table compact" data-testid="tokens-table">
          <thead>
            <tr>
              <th>Token</th>
              <th>Issued</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {active.map((token) => (
              <tr key={token.id}>
                <td>
                  #{token.id}
                  {token.label ? ` ${token.label}` : ""}
                  {token.verifier && <VerifierBadge />}
                  <span className="muted"> · up to {token.max_peers} peers</span>
                </td>
                <td>{formatTime(token.created_at)}</td>
                <td>
                  <button type="button" className="danger small" onClick={() => void revoke(token.id)}>
                    Revoke
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
