// ui.js: small DOM helpers shared by the views: element building, status
// badges (an icon and a word, never colour alone), time formatting, the
// confirmation dialog and a poller that never overlaps itself.

/** h("button", {class: "x", "data-testid": "y", onclick: f}, "text", child...) */
export function h(tag, props, ...children) {
  const el = tag.startsWith("svg:")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** Replaces el's children. */
export function fill(el, ...children) {
  el.textContent = "";
  append(el, children);
  return el;
}

/**
 * Makes el's children the given ones, as `fill` does, but keeps the nodes
 * already there: an element of the same tag (and item: `data-id`,
 * `data-name`, `data-exec`, `data-step`) at the same place is updated in
 * place (attributes, then its children the same way), a text node takes
 * the new text. A redraw that does not change a link leaves the very same
 * element, so a click the user is in the middle of (pressed before the
 * redraw, released after it) still lands on it. For content without
 * listeners: an element kept keeps its own, not those of its replacement.
 */
export function refill(el, ...children) {
  const next = document.createDocumentFragment();
  append(next, children);
  morphChildren(el, next);
  return el;
}

/** Attributes that say which item an element shows (a row, a run). */
const KEYS = ["data-id", "data-name", "data-exec", "data-step"];

/** May `a` be updated to show `b`: same node type, tag and item. */
function sameKind(a, b) {
  if (a.nodeType !== b.nodeType) return false;
  if (a.nodeType !== Node.ELEMENT_NODE) return true;
  return a.namespaceURI === b.namespaceURI && a.localName === b.localName
    && KEYS.every((k) => a.getAttribute(k) === b.getAttribute(k));
}

/** Makes `old` (kept) look like `next` (discarded). */
function morph(old, next) {
  if (old.nodeType !== Node.ELEMENT_NODE) {
    if (old.nodeValue !== next.nodeValue) old.nodeValue = next.nodeValue;
    return;
  }
  if (old.isEqualNode(next)) return;
  for (const a of [...old.attributes]) if (!next.hasAttribute(a.name)) old.removeAttribute(a.name);
  for (const a of next.attributes) if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
  morphChildren(old, next);
}

/** Makes el's children those of `next` (a node whose children move out). */
function morphChildren(el, next) {
  let old = el.firstChild;
  for (let n = next.firstChild; n;) {
    const following = n.nextSibling;
    if (old && sameKind(old, n)) {
      morph(old, n);
      old = old.nextSibling;
    } else {
      el.insertBefore(n, old);
    }
    n = following;
  }
  while (old) {
    const following = old.nextSibling;
    old.remove();
    old = following;
  }
}

export const STATUS_ICON = {
  queued: "\u25D4",      // circle, a quarter filled
  running: "\u25B6",     // play
  stopping: "\u25EB",    // square split (halting)
  stopped: "\u25A0",     // square
  completed: "\u2713",   // check
  failed: "\u2717",      // cross
  pending: "\u25CB",     // circle
  skipped: "\u21B7",     // arrow jumping over
  waiting: "\u2016",     // double bar (pause): a wait step for a signal
  unknown: "?",
};

export const EXEC_STATUSES = ["queued", "running", "stopping", "stopped", "completed", "failed"];
export const LIVE_STATUSES = new Set(["queued", "running", "stopping"]);

/** A status badge: icon + word, coloured by class. */
export function badge(status, testid) {
  const s = status || "unknown";
  return h("span", { class: `badge st-${s}`, "data-testid": testid, "data-status": s },
    h("span", { class: "icon", "aria-hidden": "true" }, STATUS_ICON[s] || "?"), " ", s);
}

export function setBadge(el, status) {
  const s = status || "unknown";
  el.className = `badge st-${s}`;
  el.dataset.status = s;
  el.firstChild.textContent = STATUS_ICON[s] || "?";
  el.lastChild.textContent = " " + s;
}

const ms = (iso) => (iso ? Date.parse(iso) : NaN);

/** "850ms", "12.3s", "4m 05s", "2h 03m", "3d 4h" */
export function fmtDuration(msecs) {
  if (!Number.isFinite(msecs) || msecs < 0) return "";
  if (msecs < 1000) return `${Math.round(msecs)}ms`;
  const s = msecs / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, "0")}s`;
  const hr = Math.floor(m / 60);
  if (hr < 48) return `${hr}h ${String(m % 60).padStart(2, "0")}m`;
  return `${Math.floor(hr / 24)}d ${hr % 24}h`;
}

/** Duration between two RFC 3339 times; a missing end means now. */
export function duration(startIso, endIso, now = Date.now()) {
  const a = ms(startIso);
  if (!Number.isFinite(a)) return "";
  const b = endIso ? ms(endIso) : now;
  return fmtDuration(b - a);
}

export function age(iso, now = Date.now()) {
  const t = ms(iso);
  if (!Number.isFinite(t)) return "";
  return fmtDuration(Math.max(0, now - t)).replace(/\.\ds$/, "s") + " ago";
}

/** A local, readable time with the full ISO time as its tooltip. */
export function timeEl(iso) {
  if (!iso) return h("span", { class: "muted" }, "\u2014");
  const d = new Date(iso);
  return h("time", { datetime: iso, title: iso }, d.toLocaleString(undefined, { hour12: false }));
}

export function shortId(id) {
  return id ? id.slice(-8) : "";
}

export function json(v) {
  return typeof v === "string" ? v : JSON.stringify(v, null, 2);
}

/** The error of a failed action, for humans. */
export function errorText(e) {
  if (e && e.status) return `${e.status} ${e.code}: ${e.message}${e.path ? ` (at ${e.path})` : ""}`;
  return String((e && e.message) || e);
}

let dialogEl = null;
let dialogOpenings = 0; // which opening of dialogEl is the current one

/**
 * An in-page modal confirmation (a <dialog>: focus is trapped, Escape
 * cancels). Resolves true when confirmed. `focus` is the element of `body`
 * to focus first (an input), else the Cancel button. The browser
 * dispatches a close event later, as a task: one that comes while the
 * dialog is open again belongs to an earlier opening, and an opening that
 * is no longer the current one resolves false.
 */
export function confirmDialog({ title, body, confirm = "Confirm", danger = false, focus = null }) {
  if (!dialogEl) {
    dialogEl = h("dialog", { class: "confirm", "data-testid": "confirm-dialog", "aria-labelledby": "confirm-title" });
    document.body.append(dialogEl);
  }
  const d = dialogEl;
  return new Promise((resolve) => {
    const no = h("button", { type: "button", class: "btn", "data-testid": "confirm-no", onclick: () => d.close("no") }, "Cancel");
    const yes = h("button", { type: "button", class: danger ? "btn danger" : "btn primary", "data-testid": "confirm-yes",
      onclick: () => d.close("yes") }, confirm);
    fill(d, h("h2", { id: "confirm-title" }, title), h("div", { class: "confirm-body" }, body),
      h("div", { class: "actions" }, no, yes));
    d.returnValue = "";
    const opening = ++dialogOpenings;
    const onClose = () => {
      if (d.open) return; // an earlier opening's late close event
      d.removeEventListener("close", onClose);
      resolve(opening === dialogOpenings && d.returnValue === "yes");
    };
    d.addEventListener("close", onClose);
    d.showModal();
    (focus || no).focus();
  });
}

/**
 * Calls fn now and then every `every` ms after each call settles, until
 * stopped; also at once when poke() is called. Returns {stop, poke}.
 */
export function poller(fn, every) {
  let timer = 0;
  let stopped = false;
  let running = false;
  let again = false;
  async function tick() {
    clearTimeout(timer);
    if (stopped) return;
    if (running) { again = true; return; }
    running = true;
    try { await fn(); } catch (e) { if (e && e.status !== 401) console.warn("poll:", e); }
    running = false;
    if (stopped) return;
    if (again) { again = false; tick(); return; }
    timer = setTimeout(tick, every);
  }
  tick();
  return { stop() { stopped = true; clearTimeout(timer); }, poke: tick };
}

/** Key/value rows for a <dl>. */
export function dl(pairs, cls = "kv", skipEmpty = false) {
  const el = h("dl", { class: cls });
  for (const [k, v] of pairs) {
    if (v === undefined || (skipEmpty && (v === null || v === ""))) continue;
    el.append(h("dt", {}, k), h("dd", {}, v === null || v === "" ? h("span", { class: "muted" }, "\u2014") : v));
  }
  return el;
}
