import { useEffect, useState } from "react";
import { call, client, errorMessage } from "../api";
import { formatTime } from "../format";
import type { TokenCreate, TokenOut } from "../generated/api";
import { useLoad } from "../hooks/useLoad";
import { keepActive, parseRemembered, recall, remember, storageKey, type RememberedCommands } from "../joinCommands";

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

/** A machine's two lines: install the peer package from the coordinator (once), then join. */
function JoinSteps({ command }: { command: string | null }) {
  const pkg = useLoad(() => call(client.GET("/api/peer-package")), []);
  const install = pkg.data?.available ? pkg.data.install_command : null;
  return (
    <ol className="join-steps" data-testid="join-steps">
      <li>
        <span className="muted">Install the peer, once per machine (Python 3.11+; it pins torch):</span>
        {install ? (
          <div className="join-command">
            <code data-testid="install-command">{install}</code>
            <CopyButton text={install} />
          </div>
        ) : (
          <p className="muted" data-testid="install-unavailable">
            {pkg.data?.detail || pkg.error || "loading…"}
          </p>
        )}
      </li>
      <li>
        <span className="muted">Join this run:</span>
        {command ? (
          <div className="join-command">
            <code data-testid="join-command">{command}</code>
            <CopyButton text={command} />
          </div>
        ) : (
          <p className="muted">Issue a join token below to get the command.</p>
        )}
      </li>
    </ol>
  );
}

/** This browser's remembered join commands of the run (the coordinator keeps only hashes). */
function useRememberedCommands(runId: number): [RememberedCommands, (next: RememberedCommands) => void] {
  const [commands, setCommands] = useState<RememberedCommands>(() =>
    parseRemembered(window.localStorage.getItem(storageKey(runId))),
  );
  function save(next: RememberedCommands) {
    setCommands(next);
    window.localStorage.setItem(storageKey(runId), JSON.stringify(next));
  }
  return [commands, save];
}

/** Issue join tokens, show the install line and the join command (again), revoke tokens. */
export function JoinPanel({ runId }: { runId: number }) {
  const loaded = useLoad(
    () => call(client.GET("/api/runs/{run_id}/tokens", { params: { path: { run_id: runId } } })),
    [runId],
  );
  const tokens = loaded.data ?? [];
  const [remembered, saveRemembered] = useRememberedCommands(runId);
  // The token whose command is shown: the one just issued, or one shown again from this browser.
  const [created, setCreated] = useState<{ id: number; join_command: string } | null>(null);
  const [actionError, setActionError] = useState("");
  const [busy, setBusy] = useState(false);
  const [label, setLabel] = useState("");
  const [maxPeers, setMaxPeers] = useState("");
  const [verifier, setVerifier] = useState(false);
  const error = actionError || loaded.error;

  const activeIds = tokens.filter((t) => !t.revoked_at).map((t) => t.id);
  const activeKey = activeIds.join(",");
  useEffect(() => {
    // Revoked tokens' commands are forgotten once the list shows them revoked (the list's ids stand for
    // the list: it is a new array each render).
    if (loaded.data !== null) saveRemembered(keepActive(remembered, activeIds));
  }, [activeKey, loaded.data]);

  /** A new token: as the form above says, or `like` an existing one (its label and limits). */
  async function issue(like?: TokenOut) {
    const body: TokenCreate = like
      ? { label: like.label, verifier: like.verifier, max_peers: like.max_peers }
      : // Without a number the coordinator applies its own default.
        ({ label: label.trim(), verifier, ...(maxPeers.trim() ? { max_peers: Number(maxPeers) } : {}) } as TokenCreate);
    setBusy(true);
    setActionError("");
    try {
      const issued = await call(
        client.POST("/api/runs/{run_id}/tokens", { params: { path: { run_id: runId } }, body }),
      );
      setCreated(issued);
      saveRemembered(remember(remembered, issued.id, issued.join_command));
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
        Anyone with the join command can add a machine to this run. The coordinator keeps only a hash of each token:
        this browser remembers the commands it was shown, other browsers issue a new token.
      </p>
      <JoinSteps command={created?.join_command ?? null} />
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
        Peers joining with a verifier token are trusted to referee spot checks: when the two peers of a stage disagree,
        one is brought to that stage to settle it. Use it only on machines you run yourself; never give one away.
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
                <td className="token-actions">
                  <TokenCommandButton
                    token={token}
                    command={recall(remembered, token.id)}
                    shown={created?.id === token.id}
                    busy={busy}
                    show={(command) => setCreated({ id: token.id, join_command: command })}
                    issueLike={() => void issue(token)}
                  />
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

/** Show a token's command again where this browser remembers it; otherwise issue a new token like it. */
function TokenCommandButton(props: {
  token: TokenOut;
  command: string | null;
  shown: boolean;
  busy: boolean;
  show: (command: string) => void;
  issueLike: () => void;
}) {
  const { command } = props;
  if (command !== null)
    return (
      <button type="button" className="secondary small" disabled={props.shown} onClick={() => props.show(command)}>
        {props.shown ? "Shown above" : "Show command"}
      </button>
    );
  return (
    <button
      type="button"
      className="secondary small"
      disabled={props.busy}
      title="Its command was shown once, in another browser; this issues a new token with the same label and limits"
      onClick={props.issueLike}
    >
      New token like this
    </button>
  );
}
