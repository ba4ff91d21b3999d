// Hash routing (#/runs/3): the coordinator serves one index.html and needs no fallback routes.
import { useEffect, useState } from "react";

export type Route =
  | { page: "runs" }
  | { page: "new-run" }
  | { page: "run"; runId: number }
  | { page: "admin" }
  | { page: "account" }
  | { page: "not-found"; path: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, "") || "/";
  if (path === "/" || path === "/runs") return { page: "runs" };
  if (path === "/runs/new") return { page: "new-run" };
  const run = /^\/runs\/(\d+)$/.exec(path);
  if (run) return { page: "run", runId: Number(run[1]) };
  if (path === "/admin") return { page: "admin" };
  if (path === "/account") return { page: "account" };
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
