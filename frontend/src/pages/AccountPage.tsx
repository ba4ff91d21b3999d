import { useState, type FormEvent } from "react";
import { call, client, errorMessage } from "../api";
import {
  EMPTY_NEW_PASSWORD,
  MIN_PASSWORD_LENGTH,
  NewPasswordFields,
  newPasswordProblem,
} from "../components/NewPasswordFields";
import type { UserOut } from "../generated/api";

function ChangePassword() {
  const [current, setCurrent] = useState("");
  const [next, setNext] = useState(EMPTY_NEW_PASSWORD);
  const [error, setError] = useState("");
  const [notice, setNotice] = useState("");
  const [busy, setBusy] = useState(false);

  async function submit(event: FormEvent) {
    event.preventDefault();
    setError("");
    setNotice("");
    const problem = newPasswordProblem(next);
    if (problem) {
      setError(problem);
      return;
    }
    setBusy(true);
    try {
      const { ended } = await call(
        client.POST("/api/auth/password", {
          body: { current_password: current, new_password: next.password },
        }),
      );
      setCurrent("");
      setNext(EMPTY_NEW_PASSWORD);
      setNotice(`Password changed. ${ended} other session${ended === 1 ? "" : "s"} ended.`);
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form className="card" onSubmit={(e) => void submit(e)} data-testid="change-password">
      <h2>Change password</h2>
      <p className="muted">
        At least {MIN_PASSWORD_LENGTH} characters, any characters: a few words are easy to remember and hard to guess.
        Your other sessions end; this one stays.
      </p>
      <label>
        Current password
        <input
          name="current-password"
          type="password"
          autoComplete="current-password"
          value={current}
          onChange={(e) => setCurrent(e.target.value)}
          required
        />
      </label>
      <NewPasswordFields value={next} onChange={setNext} />
      {error && (
        <p className="error" role="alert">
          {error}
        </p>
      )}
      {notice && (
        <p className="notice" role="status">
          {notice}
        </p>
      )}
      <button type="submit" disabled={busy}>
        {busy ? "Changing…" : "Change password"}
      </button>
    </form>
  );
}

function OtherSessions() {
  const [message, setMessage] = useState("");

  async function endOthers() {
    try {
      const { ended } = await call(client.POST("/api/auth/sessions/end-others"));
      setMessage(`${ended} other session${ended === 1 ? "" : "s"} ended.`);
    } catch (e) {
      setMessage(errorMessage(e));
    }
  }

  return (
    <div className="card">
      <h2>Sessions</h2>
      <p className="muted">Signed in somewhere you no longer are? End every session but this one.</p>
      <button type="button" className="danger" onClick={() => void endOthers()}>
        End every other session
      </button>
      {message && <p role="status">{message}</p>}
    </div>
  );
}

export function AccountPage({ user }: { user: UserOut }) {
  return (
    <section>
      <h1>Account</h1>
      <p className="muted">
        Signed in as {user.username} ({user.role}).
      </p>
      <ChangePassword />
      <OtherSessions />
    </section>
  );
}
