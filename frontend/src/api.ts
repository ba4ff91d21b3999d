// A small fetch wrapper for the coordinator's REST API: cookies for the session, the CSRF
// header on every state-changing request, and one error type that keeps per-field messages.

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

type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

export async function request<T>(method: Method, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-CSRF-Token"] = csrfToken();
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, "Cannot reach the coordinator.");
  }
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  let data: unknown = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { detail: text };
    }
  }
  if (!response.ok) {
    const error = parseErrorBody(response.status, data);
    if (response.status === 401) window.dispatchEvent(new Event("swarmhub:unauthorized"));
    throw error;
  }
  return data as T;
}

export const api = {
  get: <T>(path: string) => request<T>("GET", path),
  post: <T>(path: string, body?: unknown) => request<T>("POST", path, body ?? {}),
  del: <T>(path: string) => request<T>("DELETE", path),
};

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
