// view-nodes.js: the cluster's members (#/nodes), polled every 2 s: slots,
// running steps, tools, joined and last seen. The API lists members only, so
// a node that disappears from the list is kept here (for this tab) as lost.

import { api } from "./api.js";
import { h, fill, timeEl, age, poller } from "./ui.js";

const SEEN_KEY = "canopy.nodes.seen";
const SILENT_MS = 10000;

function remembered() {
  try { return JSON.parse(sessionStorage.getItem(SEEN_KEY) || "{}"); } catch { return {}; }
}

function stateOf(n, now) {
  if (n.lost_at) return { state: "lost", text: `lost \u2014 not listed since ${new Date(n.lost_at).toLocaleTimeString(undefined, { hour12: false })}` };
  const seen = n.last_seen ? Date.parse(n.last_seen) : NaN;
  if (Number.isFinite(seen) && now - seen > SILENT_MS) return { state: "silent", text: `silent for ${age(n.last_seen).replace(" ago", "")}` };
  return { state: "up", text: n.supervisor ? "up (supervisor)" : "up" };
}

const ICON = { up: "\u25CF", silent: "\u25D2", lost: "\u2717" };

export function nodesView(main) {
  const tbody = h("tbody", {});
  const note = h("p", { class: "muted small", "data-testid": "nodes-updated" });
  const error = h("p", { class: "error", role: "alert" });
  error.hidden = true;
  fill(main,
    h("div", { class: "title-row" }, h("h1", {}, "Nodes"), h("span", { class: "muted" }, "the supervisor first")),
    error,
    h("div", { class: "table-wrap" }, h("table", { class: "execs nodes", "data-testid": "nodes-table" },
      h("thead", {}, h("tr", {}, ["Node", "State", "Slots", "Running steps", "Tools", "Joined", "Last seen"].map((c) => h("th", { scope: "col" }, c)))),
      tbody)),
    note,
    h("p", { class: "muted small" }, "A worker that leaves the cluster disappears from the API's list; this page keeps it, marked lost, for as long as the tab is open."));

  async function load() {
    let data;
    try {
      data = await api("/v1/nodes");
      error.hidden = true;
    } catch (e) {
      if (e.status === 401) return;
      error.textContent = `Cannot load nodes: ${e.message}`;
      error.hidden = false;
      return;
    }
    const now = Date.now();
    const seen = remembered();
    const listed = new Set(data.items.map((n) => n.name));
    for (const n of data.items) seen[n.name] = { ...n, lost_at: null };
    for (const [name, n] of Object.entries(seen)) if (!listed.has(name) && !n.lost_at) n.lost_at = now;
    sessionStorage.setItem(SEEN_KEY, JSON.stringify(seen));
    const rows = [...data.items.map((n) => seen[n.name]), ...Object.values(seen).filter((n) => n.lost_at)];
    fill(tbody, rows.map((n) => {
      const st = stateOf(n, now);
      const pct = n.slots ? Math.round((n.running / n.slots) * 100) : 0;
      return h("tr", { "data-testid": "nodes-row", "data-name": n.name, "data-state": st.state, class: `node-${st.state}` },
        h("td", { "data-label": "Node" }, h("strong", {}, n.name), n.supervisor ? h("span", { class: "tag" }, "supervisor") : h("span", { class: "tag" }, "worker")),
        h("td", { "data-label": "State", "data-testid": "node-state" }, h("span", { class: `badge node-${st.state}` },
          h("span", { class: "icon", "aria-hidden": "true" }, ICON[st.state]), " ", st.text)),
        h("td", { "data-label": "Slots", class: "num" }, String(n.slots)),
        h("td", { "data-label": "Running steps" }, h("progress", { max: "100", value: String(pct), "aria-label": `${n.running} of ${n.slots} slots busy` }),
          ` ${n.lost_at ? "\u2014" : n.running} / ${n.slots}`),
        h("td", { "data-label": "Tools" }, n.tools.length ? n.tools.map((t) => h("span", { class: "tag" }, t)) : h("span", { class: "muted" }, "none")),
        h("td", { "data-label": "Joined" }, n.joined_at ? timeEl(n.joined_at) : h("span", { class: "muted" }, n.supervisor ? "(this server)" : "\u2014")),
        h("td", { "data-label": "Last seen" }, n.last_seen ? age(n.last_seen) : h("span", { class: "muted" }, n.supervisor ? "(this server)" : "\u2014")));
    }));
    note.textContent = `Live: updated ${new Date().toLocaleTimeString(undefined, { hour12: false })} (every 2 s)`;
  }
  const poll = poller(load, 2000);
  return () => poll.stop();
}
