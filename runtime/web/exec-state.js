// exec-state.js: the model behind an execution's page. It holds the tree's
// executions and steps (from GET .../tree), applies events to them in seq
// order, records what changed (so the view redraws only that), keeps the
// live step.output lines, and finds each execution's graph document (for
// the `needs` of its steps), since the execution document does not carry it.

import { api, enc } from "./api.js";

const OUTPUT_LINES = 500;

export class ExecState {
  constructor(rootId) {
    this.rootId = rootId;
    this.execs = new Map();      // id -> execution document (steps, no children)
    this.order = [];             // ids, depth first from the root
    this.children = new Map();   // id -> [child ids]
    this.events = [];            // every event received, in seq order
    this.outputs = new Map();    // "exec\u0000step" -> [{seq, stream, line}]
    this.dirtySteps = new Set(); // "exec\u0000step"
    this.dirtyExecs = new Set();
    this.dirtyOutputs = new Set();
    this.unknownExec = false;    // an event named an execution we do not have
    this.settled = false;        // an execution ended: details are worth refetching
  }

  /** Loads a tree document; returns true when the set of executions changed. */
  loadTree(tree) {
    const before = this.order.join(",");
    this.order = [];
    this.children = new Map();
    const walk = (node) => {
      const { children, ...doc } = node;
      const old = this.execs.get(doc.id);
      this.execs.set(doc.id, doc);
      if (old) this.dirtyExecs.add(doc.id);
      this.order.push(doc.id);
      this.children.set(doc.id, (children || []).map((c) => c.id));
      for (const c of children || []) walk(c);
      for (const [name, s] of Object.entries(doc.steps || {})) {
        waitFields(s);
        this.dirtySteps.add(doc.id + "\u0000" + name);
      }
    };
    walk(tree);
    this.unknownExec = false;
    return before !== this.order.join(",");
  }

  root() {
    return this.execs.get(this.rootId);
  }

  /** Appends an event to the log and applies it. */
  push(e) {
    this.events.push(e);
    this.apply(e);
  }

  apply(e) {
    const x = this.execs.get(e.execution_id);
    if (!x) {
      if (e.type.startsWith("execution.") || e.type.startsWith("step.")) this.unknownExec = true;
      return;
    }
    if (e.type === "step.output") return this.output(e);
    if (e.type.startsWith("step.") && e.step) {
      // A model's answer ends with its step's next status: a new attempt starts a new one.
      const lines = this.outputs.get(e.execution_id + "\u0000" + e.step);
      if (lines && lines.length) lines[lines.length - 1].closed = true;
      return this.applyStep(x, e);
    }
    if (e.type.startsWith("execution.")) return this.applyExec(x, e);
    if (e.type === "signal.consumed" && e.step) return this.consumed(x, e);
    // signal.received: a signal stored for the tree's waits; no status changes
  }

  /** signal.consumed: a wait took a signal (its step.completed or step.failed follows). */
  consumed(x, e) {
    const s = x.steps[e.step];
    if (!s) return;
    const d = e.data || {};
    s.answeredBy = d.by || null;
    this.dirtySteps.add(e.execution_id + "\u0000" + e.step);
  }

  output(e) {
    const key = e.execution_id + "\u0000" + e.step;
    let lines = this.outputs.get(key);
    if (!lines) this.outputs.set(key, (lines = []));
    const d = e.data || {};
    if (d.stream === "model") {
      // A model's answer comes in pieces: joined, a line per line break.
      const pieces = String(d.text ?? "").split("\n");
      const last = lines[lines.length - 1];
      if (last && last.stream === "model" && !last.closed) last.line += pieces.shift();
      for (const p of pieces) lines.push({ seq: e.seq, stream: "model", line: p });
    } else {
      lines.push({ seq: e.seq, stream: d.stream || "stdout", line: String(d.line ?? "") });
    }
    if (lines.length > OUTPUT_LINES) lines.splice(0, lines.length - OUTPUT_LINES);
    this.dirtyOutputs.add(key);
  }

  applyStep(x, e) {
    let s = x.steps[e.step];
    if (!s) {
      s = x.steps[e.step] = { status: "pending", attempt: 0, result: null, node: "", started_at: null, ended_at: null, error: null, reason: null };
      this.unknownExec = true; // a step we did not know: redraw from a fresh tree
    }
    const d = e.data || {};
    if (e.status) s.status = e.status;
    // The last escalation signal of the running attempt (step.signalled);
    // every event with a status ends it.
    if (e.status) s.signal = null;
    switch (e.type) {
      case "step.signalled":
        if (s.status === "running" && (d.attempt ?? s.attempt) === s.attempt)
          s.signal = {
            signal: String(d.signal || ""),
            next: d.next || null,
            nextAt: d.next && Number.isFinite(d.next_in_ms) ? Date.parse(e.time) + d.next_in_ms : null,
          };
        break;
      case "step.queued":
        s.reason = null;
        break;
      case "step.started":
        s.attempt = d.attempt ?? s.attempt + 1;
        s.started_at = e.time;
        s.ended_at = null;
        s.error = null;
        s.reason = null;
        break;
      case "step.completed":
        s.ended_at = e.time;
        s.error = null;
        s.reason = null;
        break;
      case "step.failed":
        s.ended_at = e.time;
        s.error = d.error ?? s.error;
        s.reason = e.reason || null;
        break;
      case "step.retry":
        s.reason = e.reason || "retry";
        s.error = d.error ?? s.error;
        break;
      case "step.pending":
        s.reason = e.reason || null;
        s.ended_at = e.time;
        break;
      case "step.skipped":
        s.reason = e.reason || null;
        s.started_at = null;
        s.ended_at = e.time;
        break;
      case "step.waiting":
        s.attempt = d.attempt ?? s.attempt;
        s.started_at = e.time;
        s.ended_at = null;
        s.error = null;
        s.reason = null;
        s.waitSignal = d.signal || s.waitSignal || null;
        s.deadline = d.deadline ?? null;
        s.prompt = d.prompt ?? null;
        s.answeredBy = null;
        break;
    }
    this.dirtySteps.add(e.execution_id + "\u0000" + e.step);
  }

  applyExec(x, e) {
    const d = e.data || {};
    if (e.status) x.status = e.status;
    switch (e.type) {
      case "execution.started":
      case "execution.resumed":
        x.started_at = x.started_at || e.time;
        x.ended_at = null;
        x.reason = null;
        x.error = null;
        break;
      case "execution.stopping":
        x.reason = e.reason || x.reason;
        break;
      case "execution.stopped":
      case "execution.failed":
      case "execution.completed":
        x.ended_at = e.time;
        x.reason = e.reason || null;
        x.error = d.error ?? (e.type === "execution.completed" ? null : x.error);
        this.settled = true;
        break;
    }
    this.dirtyExecs.add(x.id);
  }

  /** Steps in graph order with their needs (empty when the graph is unknown). */
  stepsOf(id, graph) {
    const x = this.execs.get(id);
    const names = Object.keys((x && x.steps) || {});
    const defs = (graph && graph.steps) || {};
    return names.map((name) => ({ name, needs: (defs[name] && defs[name].needs) || [] }));
  }

  /** Started attempts, cost spent and deepest depth over the tree (derived). */
  usage(graphs) {
    let attempts = 0, cost = 0, costKnown = true, depth = 0;
    for (const id of this.order) {
      const x = this.execs.get(id);
      depth = Math.max(depth, x.depth);
      const g = graphs.get(id);
      for (const [name, s] of Object.entries(x.steps || {})) {
        attempts += s.attempt || 0;
        const def = g && g.steps && g.steps[name];
        if (!g) costKnown = costKnown && !s.attempt;
        else if (def && def.cost) cost += def.cost * (s.attempt || 0);
      }
    }
    // What the tree's model calls settled to (the document's totals).
    const model = this.root() && this.root().model;
    if (model && model.spend) cost += model.spend;
    return { attempts, cost, costKnown, depth };
  }
}

/**
 * A step document names its wait's signal `signal` (a string), where the
 * state keeps the last POSIX signal sent to the step's processes
 * (step.signalled, an object): the wait's goes to `waitSignal`.
 */
function waitFields(s) {
  if (typeof s.signal === "string") {
    s.waitSignal = s.signal;
    s.signal = null;
  }
  if (s.deadline === undefined) s.deadline = null;
  if (s.prompt === undefined) s.prompt = null;
  // A wait's result {value, timed_out, by, at} says who answered it.
  const r = s.result;
  if (s.kind === "wait" && r && typeof r === "object" && typeof r.by === "string") s.answeredBy = r.by;
}

/**
 * What a step's last escalation signal says, as the CLI's live view says it:
 * "SIGINT sent · SIGTERM in 9s", "SIGKILL sent"; null without one.
 */
export function signalText(sig, now = Date.now()) {
  if (!sig || !sig.signal) return null;
  let text = `${sig.signal} sent`;
  if (sig.next && Number.isFinite(sig.nextAt))
    text += ` \u00b7 ${sig.next} in ${Math.max(0, Math.ceil((sig.nextAt - now) / 1000))}s`;
  return text;
}

/**
 * Finds graph documents. For a root: its registered version; for a child:
 * its parent graph's step (an inline graph, a registered name, an agent's
 * graph). A document is only used if its step names are the execution's.
 */
export class GraphFinder {
  constructor() {
    this.byExec = new Map();   // exec id -> Promise<doc|null>
    this.byName = new Map();   // "name@version" -> Promise<doc|null>
    this.execDocs = new Map(); // exec id -> Promise<execution doc>
  }

  registered(name, version) {
    const key = `${name}@${version || ""}`;
    if (!this.byName.has(key)) {
      const q = version ? `?version=${version}` : "";
      this.byName.set(key, api(`/v1/graphs/${enc(name)}${q}`).then((g) => g.graph, () => null));
    }
    return this.byName.get(key);
  }

  async agentGraph(agent) {
    try {
      const a = await api(`/v1/agents/${enc(agent)}`);
      return a.graph ? await this.registered(a.graph) : null;
    } catch {
      return null;
    }
  }

  execDoc(id, known) {
    if (known) return Promise.resolve(known);
    if (!this.execDocs.has(id)) this.execDocs.set(id, api(`/v1/executions/${id}`).catch(() => null));
    return this.execDocs.get(id);
  }

  /** Promise of the graph document of execution `x` (null when unknown). */
  find(x, lookup) {
    if (!this.byExec.has(x.id)) this.byExec.set(x.id, this.resolve(x, lookup).then((g) => (fits(g, x) ? g : null)));
    return this.byExec.get(x.id);
  }

  async resolve(x, lookup) {
    if (!x.parent_id) {
      if (x.agent && !x.graph_version) return this.agentGraph(x.agent);
      return this.registered(x.graph, x.graph_version);
    }
    const parent = await this.execDoc(x.parent_id, lookup(x.parent_id));
    if (!parent) return null;
    const pg = await this.find(parent, lookup);
    const def = pg && pg.steps && pg.steps[x.parent_step];
    if (!def) return x.agent ? this.agentGraph(x.agent) : null;
    if (def.graph && typeof def.graph === "object") return def.graph;
    if (typeof def.graph === "string") return this.registered(def.graph);
    if (def.agent) return this.agentGraph(x.agent || def.agent);
    return null; // a plan: the planned graph is not served
  }
}

function fits(g, x) {
  if (!g || !g.steps) return false;
  const a = Object.keys(g.steps), b = Object.keys(x.steps || {});
  if (a.length !== b.length) return false;
  const set = new Set(a);
  return b.every((n) => set.has(n));
}
