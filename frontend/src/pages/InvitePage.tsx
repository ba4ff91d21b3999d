import { useState, type FormEvent } from "react";
import { call, client, errorMessage } from "../api";
import {
  EMPTY_NEW_PASSWORD,
  MIN_PASSWORD_LENGTH,
  NewPasswordFields,
  newPasswordProblem,
} from "../components/NewPasswordFields";
import type { UserOut } from "../generated/api";
import { useLoad } from "../hooks/useLoad";

/** Opened from an admin's link: an invitation asks for a username and password, a reset for a
 *  password. The link works once; afterwards the new password signs in. */
export function InvitePage({ token, onSignIn }: { token: string; onSignIn: () => void }) {
  const loaded = useLoad(() => call(client.POST("/api/invitations/inspect", { body: { token } })), [token]);
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState(EMPTY_NEW_PASSWORD);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const [done, setDone] = useState<UserOut | null>(null);
  const info = loaded.data;

  async function submit(event: FormEvent) {
    event.preventDefault();
    setError("");
    const problem = newPasswordProblem(password);
    if (problem) {
      setError(problem);
      return;
    }
    setBusy(true);
    try {
      const body =
        info?.purpose === "invite"
          ? { token, username, password: password.password }
          : { token, password: password.password };
      setDone(await call(client.POST("/api/invitations/accept", { body })));
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  let content;
  if (loaded.error) {
    content = (
      <p className="error" role="alert">
        {loaded.error}
      </p>
    );
  } else if (info === null) {
    content = <p className="muted">Checking the link…</p>;
  } else if (done) {
    content = (
      <>
        <p className="notice" role="status">
          {info.purpose === "invite" ? `Account ${done.username} created.` : `Password of ${done.username} set.`} Sign
          in with it now.
        </p>
        <button type="button" onClick={onSignIn}>
          Go to sign in
        </button>
      </>
    );
  } else {
    content = (
      <>
        <p className="muted">
          {info.purpose === "invite"
            ? "You are invited to SwarmHub. Choose a username and a password."
            : `Choose a new password for ${info.username}. Their sessions end.`}{" "}
          At least {MIN_PASSWORD_LENGTH} characters. The link works once.
        </p>
        {info.purpose === "invite" && (
          <label>
            Username
            <input
              name="username"
              autoComplete="username"
              value={username}
              onChange={(e) => setUsername(e.target.value)}
              pattern="[A-Za-z0-9_.\-]{3,64}"
              title="3 to 64 letters, digits, '_', '.' or '-'"
              required
            />
          </label>
        )}
        <NewPasswordFields value={password} onChange={setPassword} />
        {error && (
          <p className="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" disabled={busy}>
          {info.purpose === "invite" ? "Create account" : "Set password"}
        </button>
      </>
    );
  }

  return (
    <div className="login">
      <form className="card" onSubmit={(e) => void submit(e)} data-testid="invite-form">
        <h1>{info?.purpose === "reset" ? "Reset password" : "Join SwarmHub"}</h1>
        {content}
      </form>
    </div>
  );
}
