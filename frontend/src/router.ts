// Hash routing (#/runs/3): the coordinator serves one index.html and needs no fallback routes.
import { useEffect, useState } from "react";
import { parseRunIds } from "./settingsDiff";

export type Route =
  | { page: "runs" }
  | { page: "new-run" }
  | { page: "run"; runId: number }
  | { page: "admin" }
  | { page: "account" }
  | { page: "compare"; runIds: number[] }
  | { page: "invite"; token: string }
  | { page: "contribution"; token: string }
  | { page: "not-found"; path: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, "") || "/";
  if (path === "/" || path === "/runs") return { page: "runs" };
  if (path === "/runs/new") return { page: "new-run" };
  const run = /^\/runs\/(\d+)$/.exec(path);
  if (run) return { page: "run", runId: Number(run[1]) };
  if (path === "/admin") return { page: "admin" };
  if (path === "/account") return { page: "account" };
  // Run comparison: #/compare?runs=1,2,3
  if (path === "/compare" || path.startsWith("/compare?")) return { page: "compare", runIds: parseRunIds(path) };
  // Invitation and password-reset links (#/invite/<token>), opened signed in or not.
  const invite = /^\/invite\/([A-Za-z0-9_-]+)$/.exec(path);
  if (invite) return { page: "invite", token: invite[1] };
  // A participant's own contribution (#/contribution/<token>): the link its peer printed; no sign-in.
  const contribution = /^\/contribution\/([A-Za-z0-9_-]+)$/.exec(path);
  if (contribution) return { page: "contribution", token: contribution[1] };
  return { page: "not-found", path };
}

export function navigate(path: string): void {
  window.location.hash = path;
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener("hashchange", onChange);
    return () => window.removeEventListener("hashchange", onChange);
  }, []);
  return route;
}
