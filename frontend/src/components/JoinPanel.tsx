import { useCallback, useEffect, useState } from "react";
import { api, errorMessage } from "../api";
import { formatTime } from "../format";
import type { TokenIssued, TokenOut } from "../types";

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

/** Issue join tokens, show the one-line join command, revoke tokens. */
export function JoinPanel({ runId }: { runId: number }) {
  const [tokens, setTokens] = useState<TokenOut[]>([]);
  const [created, setCreated] = useState<TokenIssued | null>(null);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const [label, setLabel] = useState("");

  const load = useCallback(() => {
    api
      .get<TokenOut[]>(`/api/runs/${runId}/tokens`)
      .then(setTokens)
      .catch((e) => setError(errorMessage(e)));
  }, [runId]);

  useEffect(load, [load]);

  async function issue() {
    setBusy(true);
    setError("");
    try {
      setCreated(await api.post<TokenIssued>(`/api/runs/${runId}/tokens`, { label: label.trim() }));
      setLabel("");
      load();
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  async function revoke(id: number) {
    setError("");
    try {
      await api.del(`/api/runs/${runId}/tokens/${id}`);
      if (created?.id === id) setCreated(null);
      load();
    } catch (e) {
      setError(errorMessage(e));
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
        <button type="button" onClick={() => void issue()} disabled={busy}>
          {created ? "Issue another token" : "Issue join token"}
        </button>
      </div>
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
                <td>#{token.id}{token.label ? ` ${token.label}` : ""}</td>
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
