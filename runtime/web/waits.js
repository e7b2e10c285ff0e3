// waits.js: what the dashboard knows about `wait` steps. The user's open
// waits (GET /v1/waits), polled for the navigation's count and the inbox;
// and pure functions: the countdown to a deadline, a waiting step's label,
// the form a wait's `schema` becomes, and the value built from that form.

import { api, request, enc } from "./api.js";
import { poller } from "./ui.js";

export const WAITS_EVERY_MS = 15000; // the open waits are polled this often

// ---- the open waits -------------------------------------------------------

let feed = null;            // the poller while signed in
let last = null;            // {items, error, at}
let generation = 0;         // a load that ends after stopWaits is dropped
const listeners = new Set();

function notify() {
  for (const fn of listeners) {
    try { fn(last); } catch (e) { console.warn(e); }
  }
}

async function loadWaits() {
  const mine = generation;
  let next;
  try {
    const data = await api("/v1/waits");
    next = { items: data.items || [], error: null, at: Date.now() };
  } catch (e) {
    if (e.status === 401) return;
    next = { items: last ? last.items : [], error: e, at: Date.now() };
  }
  if (mine !== generation) return;
  last = next;
  notify();
}

/** Starts polling the open waits (once; again after stopWaits). */
export function startWaits() {
  if (!feed) feed = poller(loadWaits, WAITS_EVERY_MS);
}

/** Stops polling and forgets them (signed out). */
export function stopWaits() {
  if (feed) feed.stop();
  feed = null;
  last = null;
  generation++;
}

/** Loads them again now (after an answer; when the inbox opens). */
export function refreshWaits() {
  if (feed) feed.poke();
}

/** fn({items, error, at}) on every load, and at once with the last one. Returns the unsubscribe. */
export function onWaits(fn) {
  listeners.add(fn);
  if (last) fn(last);
  return () => listeners.delete(fn);
}

/**
 * Sends an answer to a wait: body {value: V} or {fail: {message: M}}, to
 * the wait's root with ?step=PATH (only that wait takes it). Resolves to
 * {status, data} (200 consumed, 202 buffered); throws the ApiError of a 4xx.
 */
export function answerWait(wait, body) {
  const url = `/v1/executions/${enc(wait.root_id || wait.execution_id)}/signals/${enc(wait.signal)}?step=${enc(wait.path)}`;
  return request(url, { method: "POST", body });
}

// ---- pure functions -------------------------------------------------------

const pad2 = (n) => String(n).padStart(2, "0");

/** A duration as the CLI writes it: "850ms", "4.5s", "12s", "4m05s", "23h59m", "2d03h". */
export function shortDuration(msecs) {
  const ms = Math.max(0, Math.floor(Number.isFinite(msecs) ? msecs : 0));
  if (ms < 1000) return `${ms}ms`;
  if (ms < 10000) return `${Math.floor(ms / 1000)}.${Math.floor((ms % 1000) / 100)}s`;
  if (ms < 60000) return `${Math.floor(ms / 1000)}s`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)}m${pad2(Math.floor((ms % 60000) / 1000))}s`;
  if (ms < 86400000) return `${Math.floor(ms / 3600000)}h${pad2(Math.floor((ms % 3600000) / 60000))}m`;
  return `${Math.floor(ms / 86400000)}d${pad2(Math.floor((ms % 86400000) / 3600000))}h`;
}

/** The countdown to an RFC 3339 deadline: "23h59m left", "deadline passed", "no deadline". */
export function timeLeft(deadline, now = Date.now()) {
  const t = deadline ? Date.parse(deadline) : NaN;
  if (!Number.isFinite(t)) return "no deadline";
  return t <= now ? "deadline passed" : `${shortDuration(t - now)} left`;
}

/**
 * A waiting step's label, as `canopy show` writes it: {text: "waiting ·
 * approval · 23h59m left", short}, where `short` fits `max` characters (a
 * DAG node): without "left", then with the signal's name shortened, never
 * the countdown.
 */
export function waitLabel(signal, deadline, now = Date.now(), max = 27) {
  const left = timeLeft(deadline, now);
  const line = (sig, when) => (sig ? `waiting \u00b7 ${sig} \u00b7 ${when}` : `waiting \u00b7 ${when}`);
  const text = line(signal, left);
  if (text.length <= max) return { text, short: text };
  const bare = left.replace(/ left$/, "");
  const mid = line(signal, bare);
  if (mid.length <= max || !signal) return { text, short: mid };
  const room = max - (mid.length - signal.length) - 1;
  return { text, short: room >= 2 ? line(signal.slice(0, room) + "\u2026", bare) : line("", bare) };
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/** The one type a schema names ("" for none or several). */
function typeOf(s) {
  if (typeof s.type === "string") return s.type;
  if (Array.isArray(s.type) && s.type.length === 1 && typeof s.type[0] === "string") return s.type[0];
  if (!("type" in s) && isObject(s.properties)) return "object";
  return "";
}

const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);

function rangeHint(s) {
  const lo = num(s.minimum), hi = num(s.maximum), xlo = num(s.exclusiveMinimum), xhi = num(s.exclusiveMaximum);
  const parts = [];
  if (lo !== undefined && hi !== undefined) parts.push(`${lo} to ${hi}`);
  else if (lo !== undefined) parts.push(`at least ${lo}`);
  else if (hi !== undefined) parts.push(`at most ${hi}`);
  if (xlo !== undefined) parts.push(`over ${xlo}`);
  if (xhi !== undefined) parts.push(`under ${xhi}`);
  return parts.join(", ");
}

function lengthHint(s) {
  const lo = num(s.minLength), hi = num(s.maxLength);
  if (lo !== undefined && hi !== undefined) return `${lo} to ${hi} characters`;
  if (lo !== undefined) return `at least ${lo} character${lo === 1 ? "" : "s"}`;
  if (hi !== undefined) return `up to ${hi} characters`;
  return "";
}

/** One field of the form: a property (name) or the whole value (name null). */
function fieldOf(name, s, required) {
  const f = { name, required, kind: "json", label: name === null ? "Value" : name, hint: "", initial: undefined };
  if (!isObject(s)) {
    f.hint = "any JSON value";
    return f;
  }
  if (typeof s.title === "string" && s.title) f.label = s.title;
  const description = typeof s.description === "string" ? s.description : "";
  let hint = "";
  const t = typeOf(s);
  if (Array.isArray(s.enum) && s.enum.length) {
    f.kind = "enum";
    f.options = s.enum;
  } else if ("const" in s) {
    f.kind = "enum";
    f.options = [s.const];
  } else if (t === "boolean") {
    f.kind = "boolean";
  } else if (t === "number" || t === "integer") {
    f.kind = t;
    f.min = num(s.minimum);
    f.max = num(s.maximum);
    hint = [t === "integer" ? "a whole number" : "", rangeHint(s)].filter(Boolean).join(", ");
  } else if (t === "string") {
    f.kind = num(s.maxLength) !== undefined && s.maxLength >= 200 ? "text" : "string";
    hint = lengthHint(s);
  } else {
    hint = t ? `JSON (${t})` : "JSON";
  }
  f.hint = [description, hint].filter(Boolean).join(" \u2014 ");
  if ("default" in s) f.initial = s.default;
  return f;
}

/**
 * The form a wait's schema becomes: {whole, fields: [{name, kind, required,
 * label, hint, initial, options?, min?, max?}]}. An object schema with
 * `properties` gives a field per property (whole false), the required ones
 * first, each group in the schema's order; anything else one field for the
 * whole value. Kinds: boolean (a checkbox), number and
 * integer (a number input), string (a text input), text (a textarea: a
 * string of maxLength 200 or more), enum (a select of `enum`, or `const`),
 * json (a JSON textarea: what the form cannot represent, or no schema).
 */
export function formModel(schema) {
  if (isObject(schema) && typeOf(schema) === "object" && isObject(schema.properties) && Object.keys(schema.properties).length) {
    const required = new Set(Array.isArray(schema.required) ? schema.required : []);
    const fields = Object.entries(schema.properties).map(([name, s]) => fieldOf(name, s, required.has(name)));
    return { whole: false, fields: [...fields.filter((f) => f.required), ...fields.filter((f) => !f.required)] };
  }
  return { whole: true, fields: [fieldOf(null, schema, true)] };
}

/**
 * A field's raw state as the form holds it, for its initial value: a
 * boolean for a checkbox, the index of the option (or "") for a select, the
 * text otherwise.
 */
export function initialRaw(f) {
  const v = f.initial;
  if (f.kind === "boolean") return v === true;
  if (f.kind === "enum") {
    const i = v === undefined ? -1 : f.options.findIndex((o) => JSON.stringify(o) === JSON.stringify(v));
    return i < 0 ? (f.required && f.options.length === 1 ? "0" : "") : String(i);
  }
  if (v === undefined) return "";
  if (f.kind === "json") return JSON.stringify(v, null, 2);
  return typeof v === "string" || typeof v === "number" ? String(v) : "";
}

/** The text of an enum option in a select. */
export function optionText(v) {
  return typeof v === "string" ? v : JSON.stringify(v);
}

/**
 * The value the form sends, from each field's raw state (raw[name], raw[""]
 * for the whole): {ok: true, value} or {ok: false, field, message} when a
 * field cannot be read (not a number, not JSON). An empty text, number,
 * JSON box or an unchosen select leaves its property out (the server says
 * what is missing); a checkbox is always sent. The schema's other rules
 * (ranges, lengths, required) are the server's to check.
 */
export function buildValue(model, raw) {
  const value = {};
  for (const f of model.fields) {
    const key = f.name === null ? "" : f.name;
    const r = raw[key];
    let v;
    let given = true;
    switch (f.kind) {
      case "boolean":
        v = r === true;
        break;
      case "enum":
        if (r === "" || r === undefined || r === null) given = false;
        else v = f.options[Number(r)];
        break;
      case "number":
      case "integer": {
        const t = String(r ?? "").trim();
        if (!t) { given = false; break; }
        v = Number(t);
        if (!Number.isFinite(v)) return { ok: false, field: f.name, message: `${f.label}: "${t}" is not a number` };
        break;
      }
      case "json": {
        const t = String(r ?? "").trim();
        if (!t) { given = false; break; }
        try {
          v = JSON.parse(t);
        } catch (e) {
          return { ok: false, field: f.name, message: `${f.label}: not valid JSON (${e.message})` };
        }
        break;
      }
      default: // string, text
        v = String(r ?? "");
        if (!v && f.name !== null) given = false;
    }
    if (f.name === null) {
      if (!given) return { ok: false, field: null, message: f.kind === "enum" ? "Choose a value" : "Enter a value" };
      return { ok: true, value: v };
    }
    if (given) value[f.name] = v;
  }
  return { ok: true, value };
}
