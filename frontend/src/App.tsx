import { useCallback, useEffect, useState } from "react";
import { ApiError, call, client } from "./api";
import type { UserOut } from "./generated/api";
import { navigate, useRoute } from "./router";
import { LoginPage } from "./pages/LoginPage";
import { RunsPage } from "./pages/RunsPage";
import { CreateRunPage } from "./pages/CreateRunPage";
import { RunPage } from "./pages/RunPage";
import { AdminPage } from "./pages/AdminPage";
import { AccountPage } from "./pages/AccountPage";
import { ComparePage } from "./pages/ComparePage";
import { InvitePage } from "./pages/InvitePage";
import { ContributionPage } from "./pages/ContributionPage";

export function App() {
  const [user, setUser] = useState<UserOut | null | undefined>(undefined);
  const route = useRoute();

  const loadMe = useCallback(async () => {
    try {
      setUser(await call(client.GET("/api/auth/me")));
    } catch (error) {
      if (error instanceof ApiError && (error.status === 401 || error.status === 403)) setUser(null);
      else setUser(null);
    }
  }, []);

  useEffect(() => {
    void loadMe();
    const onUnauthorized = () => setUser(null);
    window.addEventListener("swarmhub:unauthorized", onUnauthorized);
    return () => window.removeEventListener("swarmhub:unauthorized", onUnauthorized);
  }, [loadMe]);

  async function logout() {
    try {
      await call(client.POST("/api/auth/logout"));
    } finally {
      setUser(null);
      navigate("/");
    }
  }

  if (user === undefined) return <div className="loading">Loading…</div>;
  if (route.page === "invite") {
    // Someone signed in here who opens a link for another account leaves theirs to sign in as it.
    const toSignIn = user ? () => void logout() : () => navigate("/");
    return <InvitePage token={route.token} onSignIn={toSignIn} />;
  }
  if (route.page === "contribution") return <ContributionPage token={route.token} />;
  if (user === null) return <LoginPage onSignedIn={setUser} />;

  return (
    <>
      <header className="topbar">
        <a className="brand" href="#/">
          SwarmHub
        </a>
        <nav>
          <a href="#/">Runs</a>
          <a href="#/runs/new">New run</a>
          {user.role === "admin" && <a href="#/admin">Admin</a>}
          <a href="#/account">Account</a>
        </nav>
        <div className="who">
          <span data-testid="current-user">
            {user.username} <span className="muted">({user.role})</span>
          </span>
          <button type="button" className="link" onClick={() => void logout()}>
            Sign out
          </button>
        </div>
      </header>
      <main>
        {route.page === "runs" && <RunsPage user={user} />}
        {route.page === "new-run" && <CreateRunPage />}
        {route.page === "run" && <RunPage key={route.runId} runId={route.runId} user={user} />}
        {route.page === "admin" &&
          (user.role === "admin" ? <AdminPage me={user} /> : <p className="error">Admins only.</p>)}
        {route.page === "account" && <AccountPage user={user} />}
        {route.page === "compare" && <ComparePage runIds={route.runIds} user={user} />}
        {route.page === "not-found" && <p>No page at {route.path}.</p>}
      </main>
    </>
  );
}
