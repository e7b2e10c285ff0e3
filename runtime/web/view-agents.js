// view-agents.js: agents (#/agents) and one agent (#/agents/NAME): its
// conversation history, sending a message (its run shown live from the
// run's event stream while the POST waits for the reply), cancel, on_busy.

import { api, enc, followEvents } from "./api.js";
import { h, fill, refill, badge, setBadge, timeEl, age, json, dl, shortId, errorText, confirmDialog, poller } from "./ui.js";

const BUSY_TEXT = {
  cancel_previous: "a new message stops the live run (it stays resumable)",
  queue: "a new message waits for the live run to end",
  reject: "a new message is refused while a run is live (409 busy)",
};

export function agentsView(main) {
  const tbody = h("tbody", {});
  const empty = h("p", { class: "muted", "data-testid": "agents-empty" }, "No agents yet. Create one with POST /v1/agents or `canopy agent create`.");
  empty.hidden = true;
  fill(main,
    h("div", { class: "title-row" }, h("h1", {}, "Agents")),
    h("div", { class: "table-wrap" }, h("table", { class: "execs", "data-testid": "agents-table" },
      h("thead", {}, h("tr", {}, ["Agent", "Graph", "On busy", "Node", "Updated"].map((c) => h("th", { scope: "col" }, c)))),
      tbody)),
    empty);
  const poll = poller(async () => {
    const data = await api("/v1/agents");
    empty.hidden = data.items.length > 0;
    refill(tbody, data.items.map((a) => h("tr", { "data-testid": "agent-row", "data-name": a.name },
      h("td", { "data-label": "Agent" }, h("a", { href: `#/agents/${enc(a.name)}`, "data-testid": "agent-link" }, a.name)),
      h("td", { "data-label": "Graph" }, a.graph || h("span", { class: "muted" }, "inline")),
      h("td", { "data-label": "On busy" }, h("span", { class: "tag", title: BUSY_TEXT[a.on_busy] }, a.on_busy)),
      h("td", { "data-label": "Node" }, a.node || h("span", { class: "muted" }, "any")),
      h("td", { "data-label": "Updated" }, age(a.updated_at)))));
  }, 5000);
  return () => poll.stop();
}

function content(v) {
  return typeof v === "string" ? h("div", { class: "text" }, v) : h("pre", {}, json(v));
}

function bubble(entry) {
  return h("li", { class: `msg ${entry.role}`, "data-testid": "agent-message", "data-role": entry.role },
    h("div", { class: "who" }, entry.role === "user" ? "You" : "Agent", " \u00b7 ", timeEl(entry.time),
      entry.execution_id ? [" \u00b7 ", h("a", { href: `#/executions/${entry.execution_id}`, class: "mono" }, shortId(entry.execution_id))] : null),
    content(entry.content));
}

/** A message in flight: the user's text, then its run live, then the outcome. */
function runCard(message) {
  const status = badge("queued", "agent-run-status");
  const runLink = h("span", { class: "muted" }, "waiting for the run to start\u2026");
  const steps = h("ul", { class: "compact", "data-testid": "agent-run-steps" });
  const output = h("pre", { class: "output", "data-testid": "agent-run-output" });
  output.hidden = true;
  const result = h("div", { "data-testid": "agent-run-result", "aria-live": "polite" });
  const el = h("li", { class: "msg run", "data-testid": "agent-run-live" },
    h("div", { class: "who" }, "Run ", runLink, " ", status), steps, output, result);
  const user = bubble({ role: "user", content: message, time: new Date().toISOString(), execution_id: null });
  user.dataset.pending = "true";
  const stepEls = new Map();
  const lines = [];
  let stream = null;
  return {
    els: [user, el],
    execId: null,
    follow(id) {
      if (this.execId) return;
      this.execId = id;
      el.dataset.exec = id;
      fill(runLink, h("a", { href: `#/executions/${id}`, class: "mono", "data-testid": "agent-run-link" }, shortId(id)));
      stream = followEvents(id, {
        onEvents: (events) => {
          for (const e of events) {
            if (e.type.startsWith("execution.") && e.execution_id === id && e.status) setBadge(status, e.status);
            if (e.type === "step.output") {
              lines.push(e.data && e.data.line);
              if (lines.length > 20) lines.shift();
              output.textContent = lines.join("\n");
              output.hidden = false;
            } else if (e.type.startsWith("step.") && e.step && e.execution_id === id) {
              if (!stepEls.has(e.step)) {
                const b = badge(e.status || "pending");
                stepEls.set(e.step, b);
                steps.append(h("li", {}, h("span", { class: "mono" }, e.step), " ", b));
              }
              if (e.status) setBadge(stepEls.get(e.step), e.status); // step.signalled has none
            }
          }
        },
      });
    },
    finished: false,
    finish(node, final) {
      this.finished = true;
      if (final) setBadge(status, final);
      fill(result, node);
      setTimeout(() => stream && stream.close(), 1500);
    },
    close() { if (stream) stream.close(); },
  };
}

export function agentView(main, [name]) {
  const meta = h("div", {});
  const runsEl = h("ul", { class: "compact", "data-testid": "agent-runs" });
  const history = h("ol", { class: "conversation", "data-testid": "conversation", "aria-live": "polite" });
  const inflight = h("ol", { class: "conversation" });
  const error = h("p", { class: "error", role: "alert" });
  error.hidden = true;
  const input = h("textarea", { id: "agent-msg", rows: "3", "data-testid": "agent-send-input", placeholder: "Your message (Ctrl+Enter sends)" });
  const asJson = h("input", { type: "checkbox", id: "agent-json", "data-testid": "agent-send-json" });
  const send = h("button", { type: "submit", class: "btn primary", "data-testid": "agent-send-button" }, "Send");
  const cancel = h("button", { type: "button", class: "btn danger", "data-testid": "agent-cancel-button", onclick: cancelRuns }, "\u25A0 Cancel live runs");
  const outcome = h("p", { class: "outcome", "data-testid": "agent-outcome", "aria-live": "polite" });
  outcome.hidden = true;
  const form = h("form", { class: "send", "data-testid": "agent-send-form" },
    h("label", { for: "agent-msg" }, "Message"), input,
    h("div", { class: "actions" }, h("label", { for: "agent-json", class: "inline" }, asJson, " send as JSON"), send, cancel));
  const cards = new Set();
  let known = null; // run ids live before this page sent anything
  let closed = false;
  let drawnHistory = -1;

  fill(main,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumbs" }, h("a", { href: "#/agents" }, "Agents"), " / ", name),
    h("div", { class: "title-row" }, h("h1", {}, "Agent ", h("span", { "data-testid": "agent-name" }, name))),
    error,
    h("div", { class: "agent-layout" },
      h("section", { class: "card" }, h("h2", {}, "Conversation"), history, inflight, form, outcome),
      h("aside", { class: "card" }, meta, h("h3", {}, "Live runs"), runsEl)));

  async function load() {
    let a;
    try {
      a = await api(`/v1/agents/${enc(name)}`);
    } catch (e) {
      if (e.status === 401) return;
      error.textContent = e.status === 404 ? `No agent ${name} (or it is not yours).` : `Cannot load the agent: ${errorText(e)}`;
      error.hidden = false;
      return;
    }
    if (closed) return;
    error.hidden = true;
    refill(meta, dl([
      ["Graph", a.graph || h("span", { class: "muted" }, "inline document")],
      ["On busy", h("span", {}, h("span", { class: "tag", "data-testid": "agent-on-busy" }, a.on_busy), " ", h("span", { class: "muted small" }, BUSY_TEXT[a.on_busy] || ""))],
      ["Node", a.node || "any"],
      ["Created", timeEl(a.created_at)],
      ["Updated", timeEl(a.updated_at)],
    ]));
    refill(runsEl, a.runs.length ? a.runs.map((r) => h("li", { "data-testid": "agent-run", "data-id": r }, h("a", { href: `#/executions/${r}`, class: "mono" }, r)))
      : h("li", { class: "muted" }, "none"));
    if (drawnHistory !== a.history.length) {
      drawnHistory = a.history.length;
      fill(history, a.history.map(bubble));
      if (!a.history.length) history.append(h("li", { class: "muted", "data-testid": "conversation-empty" }, "No messages yet."));
    }
    // A run this page started: follow it live.
    if (!known) known = new Set(a.runs);
    for (const r of a.runs) {
      if (known.has(r)) continue;
      const card = [...cards].find((c) => !c.execId);
      if (card) { known.add(r); card.follow(r); }
    }
  }

  const poll = poller(load, 3000);
  let fast = 0;

  async function onSend(ev) {
    ev.preventDefault();
    let message = input.value;
    if (!message.trim()) return;
    if (asJson.checked) {
      try { message = JSON.parse(message); } catch (e) { outcome.hidden = false; outcome.textContent = `Not JSON: ${e.message}`; return; }
    }
    input.value = "";
    const card = runCard(message);
    cards.add(card);
    inflight.append(...card.els);
    clearInterval(fast);
    fast = setInterval(() => poll.poke(), 250);
    try {
      const r = await api(`/v1/agents/${enc(name)}/messages`, { method: "POST", body: { message } });
      if (r.execution_id) {
        if (known) known.add(r.execution_id);
        card.follow(r.execution_id);
      }
      card.finish(r.status === "completed"
        ? h("p", { class: "muted small" }, "Replied; the reply is now in the history above.")
        : h("p", { class: "error" }, `The run ended ${r.status}${r.reason ? ` (${r.reason})` : ""}${r.error ? `: ${r.error}` : ""}.`), r.status);
      if (r.status === "completed") {
        await load(); // the reply is in the history now: the card has done its job
        card.els.forEach((e) => e.remove());
        cards.delete(card);
        card.close();
      }
    } catch (e) {
      card.finish(h("p", { class: "error" }, e.code === "busy" ? "Refused: the agent is busy (on_busy reject)."
        : e.code === "cancelled" ? "Superseded: a newer message cancelled this one before its run started." : `Failed: ${errorText(e)}`), "stopped");
    } finally {
      if (![...cards].some((c) => !c.finished)) clearInterval(fast);
      poll.poke();
    }
  }
  form.addEventListener("submit", onSend);
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) form.requestSubmit();
  });

  async function cancelRuns() {
    const ok = await confirmDialog({
      title: `Cancel the live runs of ${name}?`,
      body: h("p", {}, "Every live run of this agent is stopped (snapshotted, resumable). Its message is not added to the history."),
      confirm: "Cancel runs",
      danger: true,
    });
    if (!ok) return;
    outcome.hidden = false;
    outcome.textContent = "Cancelling\u2026";
    try {
      const r = await api(`/v1/agents/${enc(name)}/cancel`, { method: "POST", body: {} });
      outcome.textContent = r.result === "cancelled" ? "Cancelled: the live runs were stopped." : "Nothing to cancel: no run was live (no_execution).";
      outcome.dataset.result = r.result;
    } catch (e) {
      outcome.textContent = `Cancel failed: ${errorText(e)}`;
    }
    poll.poke();
  }

  return () => {
    closed = true;
    poll.stop();
    clearInterval(fast);
    for (const c of cards) c.close();
  };
}
