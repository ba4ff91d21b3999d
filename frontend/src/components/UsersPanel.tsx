import { useState } from "react";
import { call, client, errorMessage } from "../api";
import { formatTime } from "../format";
import type { InvitationIssued, InvitationOut, UserOut } from "../generated/api";
import { useLoad } from "../hooks/useLoad";
import { IssuedLink, OpenLinks } from "./InvitationLinks";

/** Every account, with disable/enable and password-reset links, and invitations for new owners. */
export function UsersPanel({ me }: { me: UserOut }) {
  const users = useLoad(() => call(client.GET("/api/users")), []);
  const links = useLoad(() => call(client.GET("/api/invitations")), []);
  const [actionError, setActionError] = useState("");
  const [issued, setIssued] = useState<InvitationIssued | null>(null);
  const error = actionError || users.error || links.error;

  async function act(what: () => Promise<unknown>) {
    setActionError("");
    try {
      await what();
    } catch (e) {
      setActionError(errorMessage(e));
    }
    users.reload();
    links.reload();
  }

  function setDisabled(user: UserOut, disabled: boolean) {
    if (disabled && !window.confirm(`Disable ${user.username}? Their sessions end at once.`)) return;
    void act(() =>
      call(client.PATCH("/api/users/{user_id}", { params: { path: { user_id: user.id } }, body: { disabled } })),
    );
  }

  function resetLink(user: UserOut) {
    void act(async () =>
      setIssued(await call(client.POST("/api/users/{user_id}/reset-link", { params: { path: { user_id: user.id } } }))),
    );
  }

  function invite() {
    void act(async () => setIssued(await call(client.POST("/api/invitations", { body: { role: "owner" } }))));
  }

  function revoke(link: InvitationOut) {
    if (issued?.id === link.id) setIssued(null);
    void act(() =>
      call(client.DELETE("/api/invitations/{invitation_id}", { params: { path: { invitation_id: link.id } } })),
    );
  }

  return (
    <div className="card">
      <div className="card-head">
        <h2>Users</h2>
        <button type="button" onClick={invite}>
          Invite an owner
        </button>
      </div>
      {error && <p className="error">{error}</p>}
      {issued && <IssuedLink issued={issued} />}
      {users.data === null && !error && <p className="muted">Loading users…</p>}
      {users.data !== null && (
        <div className="table-scroll">
          <table className="table" data-testid="admin-users">
            <thead>
              <tr>
                <th>User</th>
                <th>Role</th>
                <th>Created</th>
                <th>State</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {users.data.map((user) => (
                <tr key={user.id} data-testid="admin-user" data-username={user.username}>
                  <td>{user.username}</td>
                  <td>{user.role}</td>
                  <td>{formatTime(user.created_at)}</td>
                  <td>{user.disabled ? "disabled" : "active"}</td>
                  <td>
                    <div className="row-actions">
                      {user.id !== me.id && (
                        <button type="button" className="secondary small" onClick={() => resetLink(user)}>
                          Reset password
                        </button>
                      )}
                      {user.id !== me.id &&
                        (user.disabled ? (
                          <button type="button" className="small" onClick={() => setDisabled(user, false)}>
                            Enable
                          </button>
                        ) : (
                          <button type="button" className="danger small" onClick={() => setDisabled(user, true)}>
                            Disable
                          </button>
                        ))}
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h3 className="subhead">Open links</h3>
      {links.data !== null && <OpenLinks links={links.data} onRevoke={revoke} />}
    </div>
  );
}
