// view-graph.js: a registered graph (#/graphs/ID): its document drawn as a
// DAG, its versions, a form to start it, "stop every unfinished execution"
// (POST /v1/graphs/{id}/stop) and the live list of its executions.

import { api, enc } from "./api.js";
import { h, fill, json, errorText, confirmDialog } from "./ui.js";
import { drawDag } from "./dag.js";
import { executionTable } from "./view-executions.js";

function kind(def) {
  for (const k of ["run", "tool", "graph", "plan", "agent", "fn", "wait"])
    if (k in def) return typeof def[k] === "string" ? `${k} ${def[k]}`
      : k === "wait" && def.wait && def.wait.signal ? `wait ${def.wait.signal}` : k;
  return "";
}

export function graphView(main, [gid]) {
  const table = executionTable({ graph: gid });
  const dagBox = h("div", { class: "dag-wrap" }, h("p", { class: "muted" }, "Loading\u2026"));
  const info = h("div", {});
  const versionSel = h("select", { id: "g-version", "data-testid": "graph-version" });
  const startBox = h("div", {});
  const outcome = h("div", { class: "outcome", "data-testid": "graph-outcome", "aria-live": "polite" });
  outcome.hidden = true;
  const error = h("p", { class: "error", role: "alert" });
  error.hidden = true;
  const stopBtn = h("button", { type: "button", class: "btn danger", "data-testid": "graph-stop-button", onclick: () => stopAll("graceful") },
    "\u25A0 Stop all unfinished");
  const forceBtn = h("button", { type: "button", class: "btn danger", "data-testid": "graph-force-button", onclick: () => stopAll("force") },
    "\u26A1 Force");
  let closed = false;

  fill(main,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumbs" }, h("a", { href: "#/executions" }, "Executions"), " / graph"),
    h("div", { class: "title-row" }, h("h1", {}, "Graph ", h("span", { class: "mono", "data-testid": "graph-id" }, gid)),
      h("label", { for: "g-version", class: "inline" }, "Version ", versionSel)),
    error,
    h("section", { class: "card" }, info,
      h("div", { class: "actions", role: "group", "aria-label": "Actions" }, stopBtn, forceBtn), outcome),
    h("section", { class: "card" }, h("h2", {}, "Steps"), dagBox),
    h("section", { class: "card" }, h("h2", {}, "Start"), startBox),
    h("section", { class: "card" }, h("h2", {}, "Executions of this graph"), table.el));

  async function load(version) {
    try {
      const g = await api(`/v1/graphs/${enc(gid)}${version ? `?version=${version}` : ""}`);
      if (closed) return;
      if (!version) {
        fill(versionSel, Array.from({ length: g.version }, (_, i) => h("option", { value: String(g.version - i) }, `v${g.version - i}`)));
      }
      draw(g);
    } catch (e) {
      if (e.status === 401) return;
      error.textContent = e.status === 404 ? `No graph ${gid} (or it is not yours).` : `Cannot load the graph: ${errorText(e)}`;
      error.hidden = false;
      fill(dagBox);
    }
  }

  function draw(g) {
    const doc = g.graph || {};
    const steps = Object.entries(doc.steps || {}).map(([name, def]) => ({ name, needs: def.needs || [] }));
    const dag = drawDag(steps, {
      execId: "",
      label: (name) => ({ status: "none", text: kind(doc.steps[name]) }),
      onSelect: (name) => {
        dag.select(name);
        fill(info, summary(g), h("h3", {}, `Step ${name}`), h("pre", { "data-testid": "graph-step-def" }, json(doc.steps[name])));
      },
    });
    fill(dagBox, dag.el);
    fill(info, summary(g));
    drawStart(g);
  }

  function summary(g) {
    const doc = g.graph || {};
    return h("p", {}, `Version ${g.version} \u00b7 ${Object.keys(doc.steps || {}).length} steps`,
      doc.inputs && doc.inputs.length ? ` \u00b7 inputs: ${doc.inputs.join(", ")}` : "",
      doc.limits ? ` \u00b7 limits: ${JSON.stringify(doc.limits)}` : "");
  }

  function drawStart(g) {
    const inputs = (g.graph && g.graph.inputs) || [];
    const fields = inputs.map((name) => {
      const input = h("input", { id: `in-${name}`, "data-testid": "start-input", "data-input": name, autocomplete: "off" });
      return { name, input, label: h("label", { for: `in-${name}` }, name, input) };
    });
    const note = h("p", { class: "muted small", "aria-live": "polite" });
    const form = h("form", { class: "filters", "data-testid": "start-form" },
      fields.map((f) => f.label),
      h("button", { type: "submit", class: "btn primary", "data-testid": "start-button" }, `\u25B6 Start v${g.version}`), note);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const body = { version: g.version, inputs: {} };
      for (const f of fields) body.inputs[f.name] = f.input.value;
      try {
        const x = await api(`/v1/graphs/${enc(gid)}/executions`, { method: "POST", body });
        location.hash = `#/executions/${x.id}`;
      } catch (e) {
        note.textContent = `Start failed: ${errorText(e)}`;
      }
    });
    fill(startBox, inputs.length ? null : h("p", { class: "muted small" }, "This graph takes no inputs."), form);
  }

  async function stopAll(mode) {
    const ok = await confirmDialog({
      title: mode === "force" ? `Force stop every unfinished execution of ${gid}?` : `Stop every unfinished execution of ${gid}?`,
      body: h("p", {}, "Each queued or running execution of this graph is stopped with its subtree; running steps go back to pending and every one can be resumed."),
      confirm: mode === "force" ? "Force stop all" : "Stop all",
      danger: true,
    });
    if (!ok) return;
    outcome.hidden = false;
    fill(outcome, h("p", {}, "Stopping\u2026"));
    stopBtn.disabled = forceBtn.disabled = true;
    try {
      const r = await api(`/v1/graphs/${enc(gid)}/stop`, { method: "POST", body: { mode, wait: 15 } });
      const pending = new Set(r.pending || []); // 202: not settled when the wait ran out
      fill(outcome, r.stopped.length
        ? [h("p", {}, `Stop requested for ${r.stopped.length} execution${r.stopped.length > 1 ? "s" : ""}`,
          pending.size ? `; ${pending.size} still stopping (the list below follows them)` : "; all stopped", ":"),
          h("ul", { class: "compact" }, r.stopped.map((x) => h("li", { "data-testid": "graph-stopped-id", "data-pending": String(pending.has(x)) },
            h("a", { href: `#/executions/${x}`, class: "mono" }, x), pending.has(x) ? " \u2014 still stopping" : "")))]
        : h("p", {}, "Nothing was running: nothing to stop."));
      table.refresh();
    } catch (e) {
      fill(outcome, h("p", { class: "error" }, `Stop failed: ${errorText(e)}`));
    } finally {
      stopBtn.disabled = forceBtn.disabled = false;
    }
  }

  versionSel.addEventListener("change", () => load(Number(versionSel.value)));
  load(0);
  return () => {
    closed = true;
    table.stop();
  };
}
