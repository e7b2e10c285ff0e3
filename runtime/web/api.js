// api.js: the dashboard's only door to `canopy serve`. The bearer token
// (kept in sessionStorage, never in a URL), JSON requests, and a Server-Sent
// Events reader built on fetch() + ReadableStream, because EventSource cannot
// send an Authorization header. Any 401 forgets the token and tells the app.

const TOKEN_KEY = "canopy.token";
let unauthorizedHandler = () => {};

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** The app's reaction to a 401 (show the token prompt again). */
export function onUnauthorized(fn) {
  unauthorizedHandler = fn;
}

function unauthorized() {
  clearToken();
  unauthorizedHandler();
}

export class ApiError extends Error {
  constructor(status, code, message, path) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code || "http_" + status;
    this.path = path || "";
  }
}

/** One request; resolves to {status, data} (data null for 204). */
export async function request(path, { method = "GET", body, signal } = {}) {
  const headers = { Authorization: "Bearer " + getToken() };
  let payload;
  if (body !== undefined || method === "POST") {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body === undefined ? {} : body);
  }
  const res = await fetch(path, { method, headers, body: payload, signal, cache: "no-store" });
  if (res.status === 401) {
    unauthorized();
    throw new ApiError(401, "unauthorized", "the token was refused");
  }
  const text = res.status === 204 ? "" : await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      throw new ApiError(res.status, "bad_answer", "the server answered something that is not JSON");
    }
  }
  if (!res.ok) {
    const e = (data && data.error) || {};
    throw new ApiError(res.status, e.code, e.message, e.path);
  }
  return { status: res.status, data };
}

/** One request; resolves to the JSON body. */
export async function api(path, options) {
  return (await request(path, options)).data;
}

export const enc = encodeURIComponent;

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });

/**
 * Parses SSE text into messages. Feed it decoded text; it calls onMessage
 * with {id, event, data, retry} at each blank line. Comments are skipped.
 */
export function sseParser(onMessage) {
  let buffer = "";
  let msg = { id: null, event: "", data: [], retry: null };
  function line(l) {
    if (l === "") {
      if (msg.data.length || msg.retry !== null || msg.event)
        onMessage({ id: msg.id, event: msg.event || "message", data: msg.data.join("\n"), retry: msg.retry });
      msg = { id: null, event: "", data: [], retry: null };
      return;
    }
    if (l[0] === ":") return;
    const colon = l.indexOf(":");
    const field = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? "" : l.slice(colon + 1);
    if (value[0] === " ") value = value.slice(1);
    if (field === "data") msg.data.push(value);
    else if (field === "event") msg.event = value;
    else if (field === "id") msg.id = value;
    else if (field === "retry" && /^[0-9]+$/.test(value)) msg.retry = Number(value);
  }
  return (text) => {
    buffer += text;
    let start = 0;
    for (;;) {
      const nl = buffer.indexOf("\n", start);
      if (nl < 0) break;
      let l = buffer.slice(start, nl);
      if (l.endsWith("\r")) l = l.slice(0, -1);
      line(l);
      start = nl + 1;
    }
    buffer = buffer.slice(start);
  };
}

/**
 * Follows the event stream of an execution's subtree. Reconnects after a
 * drop with Last-Event-ID (waiting the server's `retry:`), drops any event
 * whose seq it has already delivered, and stops for good at `event: end`
 * or a 204. Callbacks:
 *   onEvents(events, receivedAt)  a batch of new events, in seq order
 *   onState(state)  "connecting" | "live" | "reconnecting" | "ended" | "error"
 *   onEnd(endData)  the stream is over (endData null after a 204)
 *   onIdle()        the stream went quiet (the replay has caught up)
 * Returns {close(), lastSeq()}.
 */
export function followEvents(id, { after = 0, onEvents, onState = () => {}, onEnd = () => {}, onIdle = () => {} }) {
  let last = after;
  let retry = 3000;
  let closed = false;
  const stopper = new AbortController();

  async function readStream(res) {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let ended = null;
    let batch = [];
    let idleTimer = 0;
    const feed = sseParser((m) => {
      if (m.retry !== null) retry = m.retry;
      if (m.event === "end") {
        try { ended = JSON.parse(m.data); } catch { ended = {}; }
        return;
      }
      if (!m.data) return;
      let ev;
      try { ev = JSON.parse(m.data); } catch { return; }
      const seq = Number(ev.seq || m.id);
      if (!(seq > last)) return; // never apply an event twice
      last = seq;
      batch.push(ev);
    });
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        feed(decoder.decode(value, { stream: true }));
        if (batch.length) {
          const b = batch;
          batch = [];
          onEvents(b, performance.now());
        }
        clearTimeout(idleTimer);
        idleTimer = setTimeout(onIdle, 25);
        if (ended) break;
      }
    } catch {
      // a dropped connection: the caller reconnects
    } finally {
      clearTimeout(idleTimer);
      reader.cancel().catch(() => {});
    }
    return ended;
  }

  async function run() {
    for (let attempt = 0; !closed; attempt++) {
      onState(attempt ? "reconnecting" : "connecting");
      let res;
      try {
        const headers = { Accept: "text/event-stream", Authorization: "Bearer " + getToken() };
        if (last > 0) headers["Last-Event-ID"] = String(last);
        res = await fetch(`/v1/executions/${enc(id)}/events`, { headers, signal: stopper.signal, cache: "no-store" });
      } catch {
        if (closed) return;
        onState("reconnecting");
        await sleep(retry, stopper.signal);
        continue;
      }
      if (res.status === 401) {
        closed = true;
        unauthorized();
        return;
      }
      if (res.status === 204) {
        onState("ended");
        onIdle();
        onEnd(null);
        return;
      }
      if (res.status === 404) {
        onState("error");
        return;
      }
      if (!res.ok) {
        onState("reconnecting");
        await sleep(retry, stopper.signal);
        continue;
      }
      onState("live");
      const ended = await readStream(res);
      if (closed) return;
      if (ended) {
        onState("ended");
        onIdle();
        onEnd(ended);
        return;
      }
      onState("reconnecting");
      await sleep(retry, stopper.signal);
    }
  }
  run();
  return {
    close() {
      closed = true;
      stopper.abort();
    },
    lastSeq: () => last,
  };
}
