// The coordinator's REST API through openapi-fetch: cookies for the session, the CSRF
// header on every state-changing request, and one error type that keeps per-field messages.
import createClient from "openapi-fetch";
import type { paths } from "./generated/api";

const CSRF_COOKIE = "swarmhub_csrf";

export function csrfToken(): string {
  for (const part of document.cookie.split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === CSRF_COOKIE) return decodeURIComponent(rest.join("="));
  }
  return "";
}

export class ApiError extends Error {
  readonly status: number;
  /** Field name -> message, from a FastAPI 422 (`detail[].loc`) or a `{detail: {field: msg}}`. */
  readonly fields: Record<string, string>;
  /** Messages that named no field (e.g. a model-level validator's, with loc ["body"]). */
  readonly unplaced: string[];

  constructor(status: number, message: string, fields: Record<string, string> = {}, unplaced: string[] = []) {
    super(message);
    this.status = status;
    this.fields = fields;
    this.unplaced = unplaced;
  }
}

interface ValidationItem {
  loc?: (string | number)[];
  msg?: string;
}

/** Turn an error body into a message and field errors. loc is e.g. ["body", "seq_len"]. */
export function parseErrorBody(status: number, body: unknown): ApiError {
  const detail = (body as { detail?: unknown } | null)?.detail;
  if (Array.isArray(detail)) {
    const fields: Record<string, string> = {};
    const loose: string[] = [];
    for (const item of detail as ValidationItem[]) {
      const loc = (item.loc ?? []).filter((p) => p !== "body" && p !== "query" && p !== "path");
      const msg = (item.msg ?? "invalid").replace(/^Value error, /, "");
      const field = loc.length > 0 ? String(loc[0]) : "";
      if (field && !(field in fields)) fields[field] = msg;
      else if (!field) loose.push(msg);
    }
    const message = loose.length > 0 ? loose.join("; ") : "Please correct the highlighted fields.";
    return new ApiError(status, message, fields, loose);
  }
  if (typeof detail === "string") return new ApiError(status, detail);
  if (detail && typeof detail === "object") {
    const fields: Record<string, string> = {};
    for (const [k, v] of Object.entries(detail as Record<string, unknown>)) fields[k] = String(v);
    return new ApiError(status, "Please correct the highlighted fields.", fields);
  }
  return new ApiError(status, `Request failed (HTTP ${status})`);
}

/** Typed client of the coordinator's REST API (paths and bodies generated from its OpenAPI). */
export const client = createClient<paths>({
  credentials: "same-origin",
  headers: { Accept: "application/json" },
});

client.use({
  onRequest({ request }) {
    if (request.method !== "GET") request.headers.set("X-CSRF-Token", csrfToken());
    return request;
  },
});

interface Outcome<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/**
 * The body of a successful `client` call, else an ApiError (status 0 when the coordinator cannot
 * be reached); a 401 also tells the app that the session is gone.
 */
export async function call<T>(pending: Promise<Outcome<T>>): Promise<T> {
  let outcome: Outcome<T>;
  try {
    outcome = await pending;
  } catch {
    throw new ApiError(0, "Cannot reach the coordinator.");
  }
  const { data, error, response } = outcome;
  if (response.ok) return data as T;
  // openapi-fetch hands over a body that is not JSON as its text.
  const failure = parseErrorBody(response.status, typeof error === "string" ? { detail: error } : error);
  if (response.status === 401) window.dispatchEvent(new Event("swarmhub:unauthorized"));
  throw failure;
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
