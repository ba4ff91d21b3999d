import { useState, type FormEvent } from "react";
import { call, client, errorMessage } from "../api";
import type { UserOut } from "../generated/api";

export function LoginPage({ onSignedIn }: { onSignedIn: (user: UserOut) => void }) {
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);

  async function submit(event: FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError("");
    try {
      await call(client.POST("/api/auth/login", { body: { username, password } }));
      onSignedIn(await call(client.GET("/api/auth/me")));
    } catch (e) {
      setError(errorMessage(e));
    } finally {
      setBusy(false);
    }
  }

  return (
    <div className="login">
      <form className="card" onSubmit={(e) => void submit(e)}>
        <h1>SwarmHub</h1>
        <p className="muted">Sign in to manage your training runs.</p>
        <label>
          Username
          <input
            name="username"
            autoComplete="username"
            value={username}
            onChange={(e) => setUsername(e.target.value)}
            required
          />
        </label>
        <label>
          Password
          <input
            name="password"
            type="password"
            autoComplete="current-password"
            value={password}
            onChange={(e) => setPassword(e.target.value)}
            required
          />
        </label>
        {error && (
          <p className="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </div>
  );
}
