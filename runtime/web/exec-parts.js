// exec-parts.js: pieces of the execution page that draw themselves from the
// ExecState: the step panel, the event log, the limits box, the child tree
// and the text of a stop's outcome.

import { api } from "./api.js";
import { signalText } from "./exec-state.js";
import { h, fill, refill, badge, setBadge, duration, timeEl, json, dl, shortId, fmtDuration } from "./ui.js";
import { timeLeft } from "./waits.js";

const LOG_ROWS = 1000; // rows kept in the DOM until "Show all" is pressed
const TAIL_LINES = 40;

const clock = (iso) => {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "" : d.toLocaleTimeString(undefined, { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
};

function tail(text, n = TAIL_LINES) {
  if (typeof text !== "string" || !text) return null;
  const lines = text.replace(/\n$/, "").split("\n");
  return (lines.length > n ? `\u2026 (${lines.length - n} earlier lines)\n` : "") + lines.slice(-n).join("\n");
}

function kindOf(def) {
  if (!def) return "";
  for (const k of ["run", "tool", "graph", "plan", "agent", "fn", "wait", "llm"]) {
    if (k in def) return typeof def[k] === "string" ? `${k} ${def[k]}`
      : k === "wait" && def.wait && def.wait.signal ? `wait ${def.wait.signal}`
      : k === "llm" && def.llm && def.llm.model ? `llm ${def.llm.model}` : k;
  }
  return "";
}

function eventRow(e) {
  const details = e.data === undefined ? "" : JSON.stringify(e.data);
  return h("tr", { "data-testid": "event-row", "data-seq": e.seq, "data-type": e.type },
    h("td", { class: "num" }, String(e.seq)), h("td", { class: "mono" }, clock(e.time)), h("td", {}, e.type),
    h("td", { class: "mono", title: e.execution_id }, shortId(e.execution_id)), h("td", {}, e.step || ""),
    h("td", {}, [e.status, e.reason].filter(Boolean).join(" \u00b7 ")),
    h("td", { class: "mono details" }, details.length > 160 ? details.slice(0, 159) + "\u2026" : details));
}

/**
 * The event log: a scrolling table, appended to in batches. It keeps the
 * last LOG_ROWS rows in the DOM; "Show all" draws the whole log (allEvents()).
 */
export function eventLog(allEvents) {
  const tbody = h("tbody", {});
  const count = h("span", { class: "muted", "data-testid": "event-count" }, "0 events");
  let cap = LOG_ROWS;
  const more = h("button", { type: "button", class: "btn small", "data-testid": "event-log-all", onclick: showAll }, "Show all");
  more.hidden = true;
  const box = h("div", { class: "log-box", tabindex: "0", "aria-label": "Event log, oldest first" },
    h("table", { class: "events" },
      h("thead", {}, h("tr", {}, ["seq", "time", "type", "execution", "step", "status", "details"].map((c) => h("th", { scope: "col" }, c)))),
      tbody));
  const el = h("section", { class: "card", "data-testid": "event-log" },
    h("div", { class: "title-row" }, h("h2", {}, "Event log"), count, more), box);
  let total = 0;

  function note() {
    const shown = tbody.children.length;
    count.textContent = shown < total ? `${total} events (the last ${shown} shown)` : `${total} events`;
    more.hidden = shown >= total;
    more.textContent = `Show all ${total}`;
  }
  function showAll() {
    cap = Infinity;
    const frag = document.createDocumentFragment();
    for (const e of allEvents()) frag.append(eventRow(e));
    fill(tbody, frag);
    note();
  }
  return {
    el,
    add(events) {
      if (!events.length) return;
      total += events.length;
      const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
      const frag = document.createDocumentFragment();
      for (const e of events.length > cap ? events.slice(-cap) : events) frag.append(eventRow(e));
      tbody.append(frag);
      while (tbody.children.length > cap) tbody.firstChild.remove();
      note();
      if (atBottom) box.scrollTop = box.scrollHeight;
    },
  };
}

/**
 * The step panel. ctx: {state, graphOf(execId) -> doc|null, onClose()}.
 * Returns {el, show(execId, step), update(), close(), current()}.
 */
export function stepPanel(ctx) {
  const el = h("aside", { class: "card step-panel", "data-testid": "step-panel", "aria-label": "Step details", tabindex: "-1" });
  el.hidden = true;
  let cur = null;     // {exec, step}
  let detail = null;  // the step as fetched (result, stdout, stderr)
  let fetching = 0;
  let tick = null;    // redraws a signal's countdown each second
  const parts = {};

  async function fetchDetail() {
    const my = ++fetching;
    try {
      const doc = await api(`/v1/executions/${cur.exec}`);
      if (my !== fetching || !cur) return;
      detail = (doc.steps || {})[cur.step] || null;
      drawDetail();
      drawLive();
    } catch { /* the live fields still show */ }
  }

  function drawDetail() {
    const d = detail || {};
    const r = d.result;
    fill(parts.result, r === null || r === undefined ? h("span", { class: "muted" }, "no result yet") : h("pre", { "data-testid": "step-result" }, json(r)));
    const out = r && tail(r.stdout), err = r && tail(r.stderr);
    fill(parts.tails,
      out ? [h("h3", {}, "stdout (tail)"), h("pre", { "data-testid": "step-stdout" }, out)] : null,
      err ? [h("h3", {}, "stderr (tail)"), h("pre", { class: "stderr", "data-testid": "step-stderr" }, err)] : null);
  }

  function drawLive() {
    clearTimeout(tick);
    tick = null;
    if (!cur) return;
    const x = ctx.state.execs.get(cur.exec);
    const s = x && x.steps[cur.step];
    if (!s) return;
    const signal = signalText(s.signal);
    const waiting = s.status === "waiting";
    if (signal && s.signal.nextAt > Date.now()) tick = setTimeout(drawLive, 1000);
    // A wait's countdown: only its text changes. The span drawn here is
    // merged into the one on the page, so the tick looks that one up.
    const left = h("span", { "data-testid": "step-deadline" }, s.deadline ? timeLeft(s.deadline) : "no deadline");
    if (waiting && s.deadline && !tick) {
      const count = () => {
        const shown = parts.live.querySelector('[data-testid="step-deadline"]');
        if (shown) shown.textContent = timeLeft(s.deadline);
        tick = setTimeout(count, 1000);
      };
      tick = setTimeout(count, 1000);
    }
    setBadge(parts.badge, s.status);
    const pid = detail && detail.pid;
    const result = detail && detail.result;
    const child = s.child_id || (detail && detail.child_id);
    // Redrawn each second while a signal counts down: merged in place, so a
    // link, a selection or the focus inside stays (ui.js refill).
    refill(parts.live, dl([
      ["Attempt", String(s.attempt)],
      ["Node", s.node || (detail && detail.node) || null],
      ["Started", timeEl(s.started_at)],
      ["Ended", timeEl(s.ended_at)],
      ["Duration", s.started_at ? duration(s.started_at, s.ended_at) + (s.ended_at ? "" : " so far") : null],
      ["Reason", s.reason ? h("span", { "data-testid": "step-reason" }, s.reason) : null],
      s.waitSignal && !signal ? [] : ["Signal", signal ? h("span", { "data-testid": "step-signal" }, signal) : null],
      s.waitSignal ? ["Waits for", h("span", {}, "signal ", h("code", { "data-testid": "step-wait-signal" }, s.waitSignal))] : [],
      waiting && s.prompt ? ["Prompt", h("span", { "data-testid": "step-prompt" }, s.prompt)] : [],
      waiting ? ["Deadline", s.deadline ? h("span", {}, timeEl(s.deadline), " \u00b7 ", left) : left] : [],
      waiting ? ["Answer", h("a", { href: `#/waits?exec=${encodeURIComponent(cur.exec)}&step=${encodeURIComponent(cur.step)}`,
        "data-testid": "step-answer-link" }, "Answer it in the inbox \u2192")] : [],
      s.answeredBy ? ["Answered by", h("span", { "data-testid": "step-answered-by" }, s.answeredBy)] : [],
      ["Error", s.error ? h("span", { class: "error", "data-testid": "step-error" }, s.error) : null],
      pid ? ["Process", String(pid)] : [],
      result && result.usage ? ["Model use", h("span", { "data-testid": "step-model-use" }, modelUse(result.usage, result.spend))] : [],
      child ? ["Child", h("a", { href: `#/executions/${child}`, "data-testid": "step-child-link" }, child)] : [],
    ].filter((p) => p.length)));
  }

  function drawOutput() {
    const lines = ctx.state.outputs.get(cur.exec + "\u0000" + cur.step) || [];
    parts.output.textContent = lines.length ? lines.map((l) => (l.stream === "stderr" ? "! " : "  ") + l.line).join("\n") : "";
    parts.outputNote.textContent = lines.length ? `${lines.length} lines (stderr marked !)` : "none yet";
    parts.output.hidden = !lines.length;
    parts.output.scrollTop = parts.output.scrollHeight;
  }

  function show(exec, step) {
    cur = { exec, step };
    detail = null;
    const g = ctx.graphOf(exec);
    const def = g && g.steps && g.steps[step];
    parts.badge = badge("pending", "step-status");
    parts.live = h("div", {});
    parts.result = h("div", {});
    parts.tails = h("div", {});
    parts.output = h("pre", { class: "output", "data-testid": "step-output" });
    parts.outputNote = h("span", { class: "muted small" });
    const x = ctx.state.execs.get(exec);
    fill(el,
      h("div", { class: "title-row" },
        h("h2", {}, "Step ", h("span", { class: "mono", "data-testid": "step-panel-name" }, step), " ", parts.badge),
        h("button", { type: "button", class: "btn small", "data-testid": "step-panel-close", "aria-label": "Close the step panel",
          onclick: () => ctx.onClose() }, "\u2715")),
      h("p", { class: "muted small" }, "in ", h("span", { class: "mono" }, shortId(exec)), x ? ` (${x.graph})` : "",
        def ? ` \u00b7 ${kindOf(def)}` : "", def && def.needs && def.needs.length ? ` \u00b7 needs ${def.needs.join(", ")}` : ""),
      parts.live,
      h("h3", {}, "Live output (step.output) ", parts.outputNote), parts.output,
      h("h3", {}, "Result"), parts.result,
      parts.tails,
      def ? h("details", {}, h("summary", {}, "Definition"), h("pre", {}, json(def))) : null);
    el.hidden = false;
    drawLive();
    drawOutput();
    drawDetail();
    fetchDetail();
  }

  let lastStatus = null;
  return {
    el,
    show(exec, step) { lastStatus = null; show(exec, step); },
    current: () => cur,
    close() { cur = null; el.hidden = true; fetching++; clearTimeout(tick); },
    /** Redraws what changed; refetches the result when the step settles. */
    update(stepChanged, outputChanged) {
      if (!cur) return;
      if (stepChanged) {
        drawLive();
        const s = ctx.state.execs.get(cur.exec)?.steps[cur.step];
        if (s && s.status !== lastStatus) {
          if (lastStatus !== null && s.status !== "running" && s.status !== "queued" && s.status !== "waiting") fetchDetail();
          lastStatus = s.status;
        }
      }
      if (outputChanged) drawOutput();
    },
    refetch: () => cur && fetchDetail(),
  };
}

/**
 * What model calls used: `702 tokens (600 in, 102 out) · spent 0.0702`, from
 * a call's `usage` or a tree's `model` totals (`spend` null or absent: unpriced).
 */
export function modelUse(usage, spend) {
  const inTok = usage.prompt_tokens || 0, outTok = usage.completion_tokens || 0;
  const text = `${inTok + outTok} tokens (${inTok} in, ${outTok} out)`;
  return typeof spend === "number" ? `${text} \u00b7 spent ${+spend.toPrecision(6)}` : text;
}

/** The limits of the execution's graph with their use, derived from the tree. */
export function limitsBox(limits, use, exec) {
  if (!limits || !Object.keys(limits).length) return null;
  const rows = [];
  const meter = (name, used, max, text) => {
    const pct = max > 0 ? Math.min(100, Math.round((used / max) * 100)) : 0;
    rows.push(h("div", { class: "limit", "data-testid": "limit", "data-limit": name },
      h("span", { class: "limit-name" }, name),
      h("progress", { max: "100", value: String(pct), "aria-label": `${name} used ${pct}%` }),
      h("span", { class: "limit-text" }, text)));
  };
  if (limits.max_steps !== undefined) meter("max_steps", use.attempts, limits.max_steps, `${use.attempts} of ${limits.max_steps} attempts started`);
  if (limits.budget !== undefined)
    meter("budget", use.cost, limits.budget, `${use.costKnown ? "" : "\u2265 "}${+use.cost.toFixed(3)} of ${limits.budget} spent`);
  if (limits.max_depth !== undefined) meter("max_depth", use.depth, limits.max_depth, `depth ${use.depth} of ${limits.max_depth}`);
  if (limits.deadline !== undefined) {
    const m = /^([0-9]+)(ms|s|m|h)$/.exec(limits.deadline);
    const max = m ? Number(m[1]) * { ms: 1, s: 1e3, m: 6e4, h: 36e5 }[m[2]] : 0;
    const used = exec.started_at ? (exec.ended_at ? Date.parse(exec.ended_at) : Date.now()) - Date.parse(exec.started_at) : 0;
    meter("deadline", used, max, `${fmtDuration(used)} of ${limits.deadline} since start`);
  }
  return h("section", { class: "card", "data-testid": "limits" },
    h("h2", {}, "Limits ", h("span", { class: "muted small" }, "(use derived from the tree: the API does not serve the stored counters)")),
    rows);
}

/** Where child execution `x` hangs: its parent step, `review#2` for an iteration. */
export function stepOf(x) {
  return x.iteration ? `${x.parent_step}#${x.iteration}` : x.parent_step;
}

/** The tree of executions as nested lists. */
export function childTree(state, currentId) {
  const item = (id) => {
    const x = state.execs.get(id);
    const kids = state.children.get(id) || [];
    return h("li", { "data-testid": "child-node", "data-id": id, "data-status": x.status },
      h("div", { class: "tree-row" },
        badge(x.status, "child-status"), " ",
        id === currentId ? h("strong", { class: "mono" }, shortId(id))
          : h("a", { href: `#/executions/${id}`, class: "mono", "data-testid": "child-link", "data-id": id }, shortId(id)),
        " ", h("span", {}, x.graph),
        x.parent_step ? h("span", { class: "muted", "data-testid": "child-step" }, ` via step ${stepOf(x)}`) : null,
        x.agent ? h("span", { class: "tag" }, `agent ${x.agent}`) : null,
        x.reason ? h("span", { class: "reason", "data-testid": "child-reason" }, ` reason: ${x.reason}`) : null,
        x.error ? h("span", { class: "error small" }, ` ${x.error}`) : null),
      kids.length ? h("ul", {}, kids.map(item)) : null);
  };
  return h("ul", { class: "tree" }, item(currentId));
}

/** Text of a stop's outcome: the answer plus the steps that went back to pending. */
export function stopOutcome(answer, before, state) {
  const back = [];
  for (const id of state.order) {
    const x = state.execs.get(id);
    for (const [name, s] of Object.entries(x.steps || {})) {
      const was = before.get(id + "\u0000" + name);
      if (s.status === "pending" && (was === "running" || was === "queued" || was === "waiting"))
        back.push({ id, name, reason: s.reason, graph: x.graph });
    }
  }
  const st = answer.stop || {};
  return h("div", {},
    h("p", {}, h("strong", {}, "Stop result: "), h("span", { "data-testid": "outcome-result" }, st.result || "sent"),
      ` (${st.mode || "graceful"} stop). The execution is `,
      badge(answer.status, "outcome-status"), answer.reason ? ` with reason ${answer.reason}` : "", "."),
    back.length
      ? h("div", {}, h("p", {}, `${back.length} step${back.length > 1 ? "s" : ""} went back to pending (resumable):`),
        h("ul", { class: "compact" }, back.map((b) => h("li", { "data-testid": "outcome-pending", "data-step": b.name, "data-exec": b.id },
          h("span", { class: "mono" }, b.name), b.id === state.rootId ? "" : ` in ${b.graph} (${shortId(b.id)})`,
          b.reason ? ` \u2014 ${b.reason}` : ""))))
      : h("p", { class: "muted" }, st.result === "no_execution" ? "Nothing was running: nothing changed." : "No running step had to go back to pending."));
}
