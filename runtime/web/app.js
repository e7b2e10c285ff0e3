// app.js: the dashboard's entry point. Hash routing (#/executions,
// #/executions/ID, #/graphs/ID, #/waits, #/agents, #/agents/NAME, #/nodes),
// the token prompt, and the navigation with the count of open waits. Each
// view is a function (main, params, query) that draws into <main> and
// returns its cleanup (timers, streams).

import { api, getToken, setToken, clearToken, onUnauthorized } from "./api.js";
import { h, fill } from "./ui.js";
import { executionsView } from "./view-executions.js";
import { executionView } from "./view-execution.js";
import { graphView } from "./view-graph.js";
import { agentsView, agentView } from "./view-agents.js";
import { nodesView } from "./view-nodes.js";
import { waitsView } from "./view-waits.js";
import { startWaits, stopWaits, onWaits } from "./waits.js";

const routes = [
  { re: /^executions\/?$/, nav: "executions", view: executionsView },
  { re: /^executions\/([0-9a-z]{1,64})$/, nav: "executions", view: executionView },
  { re: /^graphs\/([A-Za-z0-9._-]{1,128})$/, nav: "executions", view: graphView },
  { re: /^waits\/?$/, nav: "waits", view: waitsView },
  { re: /^agents\/?$/, nav: "agents", view: agentsView },
  { re: /^agents\/([A-Za-z0-9._-]{1,128})$/, nav: "agents", view: agentView },
  { re: /^nodes\/?$/, nav: "nodes", view: nodesView },
];

performance.mark("canopy:app-start");
const main = document.getElementById("app");
const nav = document.getElementById("nav");
const signout = document.getElementById("signout");
const waitsCount = document.getElementById("waits-count");
let cleanup = null;
let promptNote = "";

export function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const q = raw.indexOf("?");
  return { path: q < 0 ? raw : raw.slice(0, q), query: new URLSearchParams(q < 0 ? "" : raw.slice(q + 1)) };
}

function stopView() {
  if (cleanup) {
    const c = cleanup;
    cleanup = null;
    try { c(); } catch (e) { console.warn(e); }
  }
}

function render() {
  stopView();
  if (!getToken()) return showPrompt();
  nav.hidden = false;
  signout.hidden = false;
  startWaits();
  const { path, query } = parseHash();
  if (!path) {
    location.replace("#/executions");
    return;
  }
  for (const r of routes) {
    const m = path.match(r.re);
    if (!m) continue;
    for (const a of nav.querySelectorAll("a")) {
      if (a.dataset.nav === r.nav) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    fill(main);
    cleanup = r.view(main, m.slice(1).map(decodeURIComponent), query) || null;
    return;
  }
  fill(main, h("h1", {}, "Not found"), h("p", {}, "No such page. ", h("a", { href: "#/executions" }, "Executions")));
}

/** The navigation's count of the waits the user may answer. */
function showWaitsCount(data) {
  const n = data ? data.items.length : 0;
  waitsCount.textContent = String(n);
  waitsCount.dataset.count = data ? String(n) : "";
  waitsCount.hidden = n === 0;
  waitsCount.parentElement.setAttribute("aria-label", n ? `Waiting: ${n} to answer` : "Waiting: nothing to answer");
}
onWaits(showWaitsCount);

function showPrompt() {
  stopWaits();
  showWaitsCount(null);
  nav.hidden = true;
  signout.hidden = true;
  const input = h("input", {
    id: "token", type: "password", autocomplete: "current-password", required: true,
    "data-testid": "token-input", "aria-describedby": "token-help",
  });
  const note = h("p", { class: "error", role: "alert", "data-testid": "token-error" }, promptNote);
  note.hidden = !promptNote;
  const form = h("form", { class: "token-form", "data-testid": "token-form" },
    h("h1", {}, "Sign in to canopy"),
    h("input", { type: "text", name: "username", autocomplete: "username", value: "canopy", hidden: true, tabindex: "-1", "aria-hidden": "true" }),
    h("label", { for: "token" }, "API token"),
    input,
    h("p", { id: "token-help", class: "muted" },
      "The bearer token from the server's config. It is kept in this tab only (sessionStorage) and sent as an Authorization header."),
    note,
    h("button", { type: "submit", class: "btn primary", "data-testid": "token-submit" }, "Sign in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    setToken(token);
    promptNote = "";
    try {
      await api("/v1/agents");
    } catch (e) {
      if (e.status !== 401) {
        clearToken(); // not checked: ask again
        note.textContent = `Cannot reach the server: ${e.message}`;
        note.hidden = false;
      } else input.value = ""; // refused (the 401 handler said so): type it again
      input.focus();
      return;
    }
    render();
    main.focus();
  });
  fill(main, form);
  input.focus();
}

onUnauthorized(() => {
  promptNote = "The server refused the token (401). Enter it again.";
  const note = main.querySelector("[data-testid=token-error]");
  if (note) {
    // the prompt is up already (several requests may answer 401): keep what was typed
    note.textContent = promptNote;
    note.hidden = false;
    return;
  }
  render();
});

signout.addEventListener("click", () => {
  clearToken();
  promptNote = "";
  render();
});

window.addEventListener("hashchange", render);
render();
