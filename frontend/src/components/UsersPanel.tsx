import { useState } from "react";
import { call, client, errorMessage } from "../api";
import { formatTime } from "../format";
import type { UserOut } from "../generated/api";
import { useLoad } from "../hooks/useLoad";

/** Every account, with disable/enable: a disabled user's sessions and feeds end at once. */
export function UsersPanel({ me }: { me: UserOut }) {
  const loaded = useLoad(() => call(client.GET("/api/users")), []);
  const [actionError, setActionError] = useState("");
  const users = loaded.data;
  const error = actionError || loaded.error;

  async function setDisabled(user: UserOut, disabled: boolean) {
    if (disabled && !window.confirm(`Disable ${user.username}? Their sessions end at once.`)) return;
    setActionError("");
    try {
      await call(
        client.PATCH("/api/users/{user_id}", { params: { path: { user_id: user.id } }, body: { disabled } }),
      );
      loaded.reload();
    } catch (e) {
      setActionError(errorMessage(e));
    }
  }

  return (
    <div className="card">
      <h2>Users</h2>
      {error && <p className="error">{error}</p>}
      {users === null && !error && <p className="muted">Loading users…</p>}
      {users !== null && (
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
            {users.map((user) => (
              <tr key={user.id} data-testid="admin-user" data-username={user.username}>
                <td>{user.username}</td>
                <td>{user.role}</td>
                <td>{formatTime(user.created_at)}</td>
                <td>{user.disabled ? "disabled" : "active"}</td>
                <td>
                  {user.id !== me.id &&
                    (user.disabled ? (
                      <button type="button" className="small" onClick={() => void setDisabled(user, false)}>
                        Enable
                      </button>
                    ) : (
                      <button type="button" className="danger small" onClick={() => void setDisabled(user, true)}>
                        Disable
                      </button>
                    ))}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
