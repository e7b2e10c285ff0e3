// view-executions.js: the default view. Root executions newest first, polled
// every 2 s: filter by status and graph, search by id, counts per status,
// duration and age columns, pages through the API's `next` cursor. Also
// exports the table so the graph view can list a graph's executions.

import { api, enc } from "./api.js";
import { h, fill, badge, setBadge, duration, age, timeEl, errorText, poller, EXEC_STATUSES, STATUS_ICON } from "./ui.js";

const PAGE = 50;

/**
 * A live table of executions. opts: {graph, status, onChange()}. Returns
 * {el, setFilter({status, graph}), stop()}.
 */
export function executionTable(opts = {}) {
  let filter = { status: opts.status || "", graph: opts.graph || "", search: "" };
  let cursors = [null];
  let page = 0;
  let next = null;
  let items = [];
  const rows = new Map();
  const tbody = h("tbody", {});
  const note = h("p", { class: "muted small", "data-testid": "list-updated", "aria-live": "off" });
  const error = h("p", { class: "error", role: "alert" });
  error.hidden = true;
  const empty = h("p", { class: "muted", "data-testid": "list-empty" }, "No executions match.");
  empty.hidden = true;
  const newer = h("button", { type: "button", class: "btn", "data-testid": "page-newer", onclick: () => go(page - 1) }, "\u2190 Newer");
  const older = h("button", { type: "button", class: "btn", "data-testid": "page-older", onclick: () => go(page + 1) }, "Older \u2192");
  const pageNo = h("span", { class: "muted", "data-testid": "page-number" });
  const table = h("div", { class: "table-wrap" },
    h("table", { class: "execs", "data-testid": "exec-table" },
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "Execution"), h("th", { scope: "col" }, "Graph"), h("th", { scope: "col" }, "Status"),
        h("th", { scope: "col", class: "opt" }, "Reason"), h("th", { scope: "col", class: "opt" }, "Created"),
        h("th", { scope: "col" }, "Age"), h("th", { scope: "col" }, "Duration"))),
      tbody));
  const el = h("section", { class: "exec-list" }, error, table, empty,
    h("div", { class: "pager" }, newer, pageNo, older), note);

  function url() {
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (filter.status) q.set("status", filter.status);
    if (filter.graph) q.set("graph", filter.graph);
    if (cursors[page]) q.set("cursor", cursors[page]);
    return "/v1/executions?" + q;
  }

  async function load() {
    try {
      const data = await api(url());
      const before = new Map(items.map((x) => [x.id, x.status]));
      const changed = data.items.some((x) => before.get(x.id) !== x.status);
      items = data.items;
      if (changed && opts.onChange) opts.onChange();
      next = data.next;
      error.hidden = true;
      draw();
      note.textContent = `Live: updated ${new Date().toLocaleTimeString(undefined, { hour12: false })} (every 2 s)`;
    } catch (e) {
      if (e.status === 401) return;
      error.textContent = `Cannot load executions: ${errorText(e)}`;
      error.hidden = false;
    }
  }

  function row(x) {
    const link = h("a", { href: `#/executions/${x.id}`, class: "mono", "data-testid": "exec-link" }, x.id);
    const status = badge(x.status, "exec-status");
    const reasonInline = h("span", { class: "reason-inline" });
    const tr = h("tr", { "data-testid": "exec-row", "data-id": x.id },
      h("td", { "data-label": "Execution" }, link, x.agent ? h("span", { class: "tag" }, `agent ${x.agent}`) : null),
      h("td", { "data-label": "Graph" }, h("a", { href: `#/graphs/${enc(x.graph)}` }, x.graph),
        x.graph_version ? h("span", { class: "muted" }, ` v${x.graph_version}`) : null),
      h("td", { "data-label": "Status" }, status, reasonInline),
      h("td", { "data-label": "Reason", class: "opt", "data-testid": "exec-reason" }),
      h("td", { "data-label": "Created", class: "opt" }, timeEl(x.created_at)),
      h("td", { "data-label": "Age", "data-testid": "exec-age" }),
      h("td", { "data-label": "Duration", "data-testid": "exec-duration" }));
    return { tr, status, reasonInline, cells: tr.children };
  }

  function update(r, x) {
    setBadge(r.status, x.status);
    r.cells[3].textContent = x.reason || (x.error ? "error" : "");
    r.cells[3].title = x.error || "";
    r.reasonInline.textContent = x.reason || "";
    r.cells[5].textContent = age(x.created_at);
    r.cells[6].textContent = x.started_at ? duration(x.started_at, x.ended_at) : "not started";
  }

  function draw() {
    const s = filter.search.toLowerCase();
    const shown = s ? items.filter((x) => x.id.includes(s)) : items;
    const order = shown.map((x) => x.id);
    const same = order.length === tbody.children.length && order.every((id, i) => tbody.children[i].dataset.id === id);
    for (const x of shown) {
      if (!rows.has(x.id)) rows.set(x.id, row(x));
      update(rows.get(x.id), x);
    }
    if (!same) fill(tbody, shown.map((x) => rows.get(x.id).tr));
    for (const id of rows.keys()) if (!order.includes(id)) rows.delete(id);
    empty.hidden = shown.length > 0;
    newer.disabled = page === 0;
    older.disabled = !next;
    pageNo.textContent = `page ${page + 1}`;
  }

  function go(p) {
    if (p < 0) return;
    if (p > page) cursors[p] = next;
    page = p;
    cursors.length = page + 1;
    poll.poke();
  }

  const poll = poller(load, 2000);
  return {
    el,
    setFilter(f) {
      filter = { ...filter, ...f };
      cursors = [null];
      page = 0;
      if ("search" in f && Object.keys(f).length === 1) draw();
      else poll.poke();
    },
    refresh: () => poll.poke(),
    stop: () => poll.stop(),
  };
}

/** Counts per status (roots), up to 1,000 each ("1000+" beyond). */
function statusCounts(onPick) {
  const buttons = new Map();
  const el = h("div", { class: "counts", role: "group", "aria-label": "Executions per status", "data-testid": "status-counts" });
  for (const s of EXEC_STATUSES) {
    const n = h("span", { class: "n", "data-testid": "status-count-n" }, "\u2026");
    const b = h("button", { type: "button", class: `count st-${s}`, "data-testid": "status-count", "data-status": s,
      "aria-pressed": "false", onclick: () => onPick(s) },
    h("span", { class: "icon", "aria-hidden": "true" }, STATUS_ICON[s]), ` ${s} `, n);
    buttons.set(s, { b, n });
    el.append(b);
  }
  let graph = "";
  // The API has no counts: list each status (up to 1,000). Live statuses are
  // few and change fast (every 3 s); settled lists are long (every 30 s).
  const load = (statuses) => () => Promise.all(statuses.map(async (s) => {
    const q = new URLSearchParams({ status: s, limit: "1000" });
    if (graph) q.set("graph", graph);
    const data = await api("/v1/executions?" + q);
    buttons.get(s).n.textContent = data.items.length + (data.next ? "+" : "");
  }));
  const polls = [poller(load(["queued", "running", "stopping"]), 3000), poller(load(["stopped", "completed", "failed"]), 30000)];
  return {
    el,
    setGraph(g) {
      if (g === graph) return;
      graph = g;
      polls.forEach((p) => p.poke());
    },
    setActive(status) {
      for (const [s, { b }] of buttons) b.setAttribute("aria-pressed", String(s === status));
    },
    poke: () => polls.forEach((p) => p.poke()),
    stop: () => polls.forEach((p) => p.stop()),
  };
}

async function graphNames() {
  try {
    const data = await api("/v1/graphs?limit=1000");
    return data.items.map((g) => g.id);
  } catch {
    return [];
  }
}

export function executionsView(main, _params, query) {
  const status = EXEC_STATUSES.includes(query.get("status")) ? query.get("status") : "";
  const graph = query.get("graph") || "";
  const table = executionTable({ status, graph, onChange: () => counts.poke() });
  const counts = statusCounts((s) => {
    statusSel.value = statusSel.value === s ? "" : s;
    apply();
  });
  const statusSel = h("select", { id: "f-status", "data-testid": "filter-status" },
    h("option", { value: "" }, "any"), EXEC_STATUSES.map((s) => h("option", { value: s }, s)));
  statusSel.value = status;
  const graphIn = h("input", { id: "f-graph", list: "graph-names", "data-testid": "filter-graph", placeholder: "any", value: graph,
    autocomplete: "off" });
  const names = h("datalist", { id: "graph-names" });
  const idIn = h("input", { id: "f-id", "data-testid": "filter-id", placeholder: "id or part of one", autocomplete: "off",
    spellcheck: "false" });
  const searchNote = h("p", { class: "muted small", "data-testid": "search-note", "aria-live": "polite" });

  function apply() {
    const q = new URLSearchParams();
    if (statusSel.value) q.set("status", statusSel.value);
    if (graphIn.value.trim()) q.set("graph", graphIn.value.trim());
    history.replaceState(null, "", "#/executions" + (q.toString() ? "?" + q : ""));
    table.setFilter({ status: statusSel.value, graph: graphIn.value.trim() });
    counts.setGraph(graphIn.value.trim());
    counts.setActive(statusSel.value);
  }
  async function search(ev) {
    ev.preventDefault();
    const id = idIn.value.trim().toLowerCase();
    table.setFilter({ search: id });
    searchNote.textContent = "";
    if (!/^[0-9a-z]{1,64}$/.test(id)) return;
    try {
      await api(`/v1/executions/${id}`);
      location.hash = `#/executions/${id}`;
    } catch (e) {
      if (e.status === 404) searchNote.textContent = `No execution has the id ${id}; the table shows the rows of this page whose id contains it.`;
    }
  }
  statusSel.addEventListener("change", apply);
  graphIn.addEventListener("change", apply);
  idIn.addEventListener("input", () => table.setFilter({ search: idIn.value.trim().toLowerCase() }));
  counts.setActive(status);
  counts.setGraph(graph);

  fill(main,
    h("div", { class: "title-row" }, h("h1", {}, "Executions"), h("span", { class: "muted" }, "root executions, newest first")),
    counts.el,
    h("form", { class: "filters", "data-testid": "filters", onsubmit: search },
      h("label", { for: "f-status" }, "Status", statusSel),
      h("label", { for: "f-graph" }, "Graph", graphIn), names,
      h("label", { for: "f-id" }, "Search id", idIn),
      h("button", { type: "submit", class: "btn", "data-testid": "filter-id-go" }, "Find")),
    searchNote,
    table.el);
  graphNames().then((list) => fill(names, list.map((g) => h("option", { value: g }))));
  return () => {
    table.stop();
    counts.stop();
  };
}
