import { useState } from "react";
import { expiresIn, invitationUrl } from "../invite";
import type { InvitationIssued, InvitationOut } from "../generated/api";

/** A link just issued: shown once (the server keeps only its hash), with a copy button. */
export function IssuedLink({ issued }: { issued: InvitationIssued }) {
  const url = invitationUrl(window.location, issued.token);
  const [copied, setCopied] = useState(false);

  async function copy() {
    try {
      await navigator.clipboard.writeText(url);
      setCopied(true);
    } catch {
      // No clipboard (plain http on another host): the field is selected for a manual copy.
      setCopied(false);
    }
  }

  const what = issued.purpose === "invite" ? `Invitation (${issued.role})` : `Password reset for ${issued.username}`;
  return (
    <div className="issued-link" data-testid="issued-link">
      <p>
        {what}: send this link, it works once and expires {expiresIn(issued.expires_at, Date.now())}. It is shown only
        now.
      </p>
      <div className="copy-row">
        <input readOnly value={url} aria-label="Link" onFocus={(e) => e.target.select()} data-testid="issued-url" />
        <button type="button" className="secondary small" onClick={() => void copy()}>
          {copied ? "Copied" : "Copy"}
        </button>
      </div>
    </div>
  );
}

/** Links not used yet, with revoke. */
export function OpenLinks({ links, onRevoke }: { links: InvitationOut[]; onRevoke: (link: InvitationOut) => void }) {
  if (links.length === 0) return <p className="muted">No open links.</p>;
  return (
    <div className="table-scroll">
      <table className="table" data-testid="open-links">
        <thead>
          <tr>
            <th>Link</th>
            <th>Issued by</th>
            <th>Expires</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {links.map((link) => (
            <tr key={link.id} data-testid="open-link">
              <td>{link.purpose === "invite" ? `invitation (${link.role})` : `password reset for ${link.username}`}</td>
              <td>{link.created_by_name ?? "—"}</td>
              <td title={link.expires_at}>{expiresIn(link.expires_at, Date.now())}</td>
              <td>
                <button type="button" className="danger small" onClick={() => onRevoke(link)}>
                  Revoke
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
