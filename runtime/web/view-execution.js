// view-execution.js: one execution (#/executions/ID). Its tree of child
// executions, each execution's steps as a DAG, the step panel, the event
// log, limits, and Stop / Force / Resume with a confirmation dialog. Live
// from the SSE stream; DOM updates are batched per animation frame and the
// SVG is built once per execution (later only classes and texts change).

import { api, request, followEvents } from "./api.js";
import { h, fill, refill, badge, setBadge, duration, timeEl, json, dl, shortId, errorText, confirmDialog, LIVE_STATUSES } from "./ui.js";
import { ExecState, GraphFinder } from "./exec-state.js";
import { drawDag } from "./dag.js";
import { eventLog, stepPanel, limitsBox, childTree, stopOutcome, stepOf, modelUse } from "./exec-parts.js";
import { waitLabel, refreshWaits } from "./waits.js";

const OPEN_CHILDREN = 12; // child DAGs drawn at once; the rest when opened
const HOLD_MAX_MS = 1500; // longest wait for the replay to catch up

/** Live measurements, read by the benchmark and the tests. */
function newStats() {
  return {
    received: 0, applied: 0, lastSeqReceived: 0, lastSeqApplied: 0, batches: 0,
    lags: [], maxLag: 0, headerDraws: 0, e2e: [], dagDrawnAt: null, treeLoadedAt: null, caughtUpAt: null,
  };
}

export function executionView(main, [id]) {
  const state = new ExecState(id);
  const finder = new GraphFinder();
  const graphs = new Map();  // exec id -> graph document or null
  const sections = new Map(); // exec id -> {el, head, body, dag, drawn, note}
  const stats = (window.__canopyStats = newStats());
  let stream = null, raf = 0, closed = false, holding = true, holdTimer = 0, watch = 0;
  let fresh = [], batches = [];
  let busy = false;
  let layoutEl = null;
  let rootDrawn = false, releaseWanted = false;
  let snapshotLive = true; // was the tree live when last loaded? (a settled one cannot change)

  const el = {
    crumbs: h("nav", { class: "crumbs", "aria-label": "Breadcrumbs" }),
    title: h("h1", {}, "Execution ", h("span", { class: "mono", "data-testid": "exec-id" }, id)),
    status: badge("unknown", "exec-status-detail"),
    meta: h("div", { class: "meta" }),
    streamState: h("span", { class: "stream", "data-testid": "stream-state", "data-state": "connecting", role: "status" }, "connecting\u2026"),
    stop: h("button", { type: "button", class: "btn", "data-testid": "stop-button", disabled: true, onclick: () => stopAction("graceful") }, "\u25A0 Stop"),
    force: h("button", { type: "button", class: "btn danger", "data-testid": "force-button", disabled: true, onclick: () => stopAction("force") }, "\u26A1 Force stop"),
    resume: h("button", { type: "button", class: "btn primary", "data-testid": "resume-button", disabled: true, onclick: resumeAction }, "\u21BB Resume"),
    outcome: h("div", { class: "outcome", "data-testid": "outcome", "aria-live": "polite" }),
    limits: h("div", { class: "limits-slot" }),
    tree: h("div", { "data-testid": "child-tree", class: "tree-wrap" }),
    dags: h("div", { class: "dags" }),
    error: h("p", { class: "error", role: "alert" }),
  };
  el.error.hidden = true;
  el.outcome.hidden = true;
  const log = eventLog(() => state.events);
  const panel = stepPanel({ state, graphOf: (x) => graphs.get(x) || null, onClose: () => select(null, null) });

  fill(main,
    el.crumbs,
    h("div", { class: "title-row" }, el.title, el.status, el.streamState),
    el.error,
    (layoutEl = h("div", { class: "exec-layout" },
      h("div", { class: "exec-main" },
        h("section", { class: "card" }, el.meta,
          h("div", { class: "actions", role: "group", "aria-label": "Actions" }, el.stop, el.force, el.resume), el.outcome),
        h("div", { class: "cards-row" }, h("section", { class: "card" }, h("h2", {}, "Tree"), el.tree), el.limits),
        h("section", { class: "card" }, h("h2", {}, "Steps"),
          h("p", { class: "muted small legend" }, "Left to right by ", h("code", {}, "needs"),
            ". Select a step (click; or Tab to the graph, arrow keys, Enter) for its details."),
          el.dags)),
      panel.el)),
    log.el);

  // ---- drawing --------------------------------------------------------

  function drawHeader() {
    const x = state.root();
    if (!x) return;
    stats.headerDraws++;
    setBadge(el.status, x.status);
    const crumbs = [h("a", { href: "#/executions" }, "Executions")];
    if (x.root_id && x.root_id !== x.id) crumbs.push(" / ", h("a", { href: `#/executions/${x.root_id}`, "data-testid": "root-link" }, `root ${shortId(x.root_id)}`));
    if (x.parent_id && x.parent_id !== x.root_id) crumbs.push(" / ", h("a", { href: `#/executions/${x.parent_id}`, "data-testid": "parent-link" }, `parent ${shortId(x.parent_id)}`));
    refill(el.crumbs, crumbs, " / ", h("span", { class: "mono" }, shortId(x.id)));
    refill(el.meta, dl([
      ["Graph", h("span", {}, h("a", { href: `#/graphs/${encodeURIComponent(x.graph)}`, "data-testid": "exec-graph-link" }, x.graph), x.graph_version ? ` v${x.graph_version}` : "")],
      ["Status", h("span", { "data-testid": "exec-status-text" }, x.status)],
      ["Reason", x.reason ? h("strong", { "data-testid": "exec-reason" }, x.reason) : null],
      ["Error", x.error ? h("span", { class: "error", "data-testid": "exec-error" }, x.error) : null],
      x.parent_id ? ["Parent", h("a", { href: `#/executions/${x.parent_id}`, class: "mono" }, x.parent_id)] : [],
      x.parent_step ? ["Parent step", stepOf(x)] : [],
      x.agent ? ["Agent", h("a", { href: `#/agents/${encodeURIComponent(x.agent)}` }, x.agent)] : [],
      x.node ? ["Node", x.node] : [],
      ["Created", timeEl(x.created_at)],
      ["Started", timeEl(x.started_at)],
      ["Ended", x.ended_at ? timeEl(x.ended_at) : null],
      ["Duration", x.started_at ? duration(x.started_at, x.ended_at) : null],
      ["Model", x.model ? h("span", { "data-testid": "exec-model-use" },
        `${x.model.calls} call${x.model.calls === 1 ? "" : "s"} \u00b7 ${modelUse(x.model, x.model.spend)}`) : null],
      ["Inputs", Object.keys(x.inputs || {}).length ? h("pre", {}, json(x.inputs)) : null],
      ["Outputs", x.outputs && Object.keys(x.outputs).length ? h("pre", { "data-testid": "exec-outputs" }, json(x.outputs)) : null],
    ].filter((p) => p.length), "kv", true));
    const live = LIVE_STATUSES.has(x.status);
    el.stop.disabled = busy || !live || x.status === "stopping";
    el.force.disabled = busy || !live;
    el.resume.disabled = busy || !(x.status === "stopped" || x.status === "failed");
    const g = graphs.get(id);
    const box = g ? limitsBox(g.limits, state.usage(graphs), x) : null;
    fill(el.limits, box);
  }

  function stepLabel(execId) {
    return (name) => {
      const s = state.execs.get(execId).steps[name] || { status: "pending", attempt: 0 };
      if (s.status === "waiting") {
        // "waiting · approval · 23h59m left", as `canopy show` says it
        const { text, short } = waitLabel(s.waitSignal, s.deadline);
        return { status: s.status, text, short };
      }
      let text = s.status;
      if (s.attempt > 1) text += ` #${s.attempt}`;
      if (s.reason) text += ` \u00b7 ${s.reason}`;
      else if (s.status === "failed" && s.error) text += ` \u00b7 ${s.error}`;
      else if (s.signal) text += ` \u00b7 ${s.signal.signal} sent`;
      return { status: s.status, text };
    };
  }

  function sectionHead(sec, x) {
    refill(sec.head, badge(x.status, "dag-exec-status"), " ",
      x.id === id ? h("span", {}, x.graph) : h("a", { href: `#/executions/${x.id}` }, x.graph),
      " ", h("span", { class: "mono muted" }, shortId(x.id)),
      x.parent_step && x.id !== id ? h("span", { class: "muted" }, ` via step ${stepOf(x)}`) : null,
      x.reason ? h("span", { class: "reason" }, ` \u2014 ${x.reason}`) : null);
  }

  function ensureSection(execId, index) {
    if (sections.has(execId)) return sections.get(execId);
    const x = state.execs.get(execId);
    const isRoot = execId === id;
    const head = h(isRoot ? "h3" : "summary", { class: "dag-head" });
    const note = h("p", { class: "muted small" });
    const body = h("div", { class: "dag-wrap", tabindex: "-1" }, h("p", { class: "muted" }, "Loading the graph\u2026"));
    const sec = { head, note, body, dag: null, drawn: false };
    if (isRoot) sec.el = h("section", { class: "dag-section", "data-testid": "dag-section", "data-exec": execId }, head, note, body);
    else {
      sec.el = h("details", { class: "dag-section child", "data-testid": "dag-section", "data-exec": execId }, head, note, body);
      if (index <= OPEN_CHILDREN) sec.el.open = true;
      sec.el.addEventListener("toggle", () => sec.el.open && drawSection(execId));
    }
    sectionHead(sec, x);
    sections.set(execId, sec);
    return sec;
  }

  async function drawSection(execId) {
    const sec = sections.get(execId);
    if (!sec || sec.drawn || sec.drawing) return;
    sec.drawing = true;
    const x = state.execs.get(execId);
    const g = await finder.find(x, (pid) => state.execs.get(pid));
    if (closed) return;
    graphs.set(execId, g);
    if (execId === id) performance.mark("canopy:graph-found");
    const dag = drawDag(state.stepsOf(execId, g), { execId, label: stepLabel(execId), onSelect: (name) => select(execId, name) });
    if (execId === id) performance.mark("canopy:dag-built");
    sec.dag = dag;
    sec.drawn = true;
    fill(sec.note, g ? "" : "Dependencies unknown: the API serves no graph document for this execution (steps shown in graph order).");
    fill(sec.body, dag.el);
    if (execId === id) {
      drawHeader();
      // After the frame that shows the DAG: mark it, then apply the replay.
      requestAnimationFrame(() => setTimeout(() => {
        performance.mark("canopy:dag-drawn");
        stats.dagDrawnAt = performance.now();
        rootDrawn = true;
        if (!stream) {
          holdTimer = setTimeout(release, HOLD_MAX_MS);
          startStream(); // the replay is applied once it caught up (see release)
        }
        if (releaseWanted) release();
      }, 0));
    }
  }

  function drawSections() {
    state.order.forEach((execId, i) => {
      const sec = ensureSection(execId, i);
      if (sec.el.parentNode !== el.dags || el.dags.children[i] !== sec.el) el.dags.insertBefore(sec.el, el.dags.children[i] || null);
      if (execId === id || sec.el.open) drawSection(execId);
    });
  }

  function drawTree() {
    refill(el.tree, childTree(state, id));
  }

  function select(execId, name) {
    for (const [eid, sec] of sections) if (sec.dag) sec.dag.select(eid === execId ? name : null);
    if (!name) {
      layoutEl.classList.remove("with-panel");
      return panel.close();
    }
    panel.show(execId, name);
    layoutEl.classList.add("with-panel");
    if (window.matchMedia("(max-width: 1099px)").matches) panel.el.scrollIntoView({ block: "start" });
  }

  // ---- live updates ---------------------------------------------------

  function schedule() {
    if (!raf && !closed) raf = requestAnimationFrame(flush);
  }

  function flush() {
    raf = 0;
    if (holding || closed) return;
    const now = performance.now(), wall = Date.now();
    if (stats.caughtUpAt === null) stats.caughtUpAt = now;
    for (const b of batches) {
      const lag = now - b.at;
      if (stats.lags.length < 20000) {
        stats.lags.push(lag);
        stats.e2e.push(wall - Date.parse(b.lastTime));
      }
      stats.maxLag = Math.max(stats.maxLag, lag);
      stats.applied += b.n;
      stats.lastSeqApplied = b.lastSeq;
    }
    batches = [];
    log.add(fresh);
    fresh = [];
    const cur = panel.current();
    let stepChanged = false;
    for (const key of state.dirtySteps) {
      const [execId, name] = key.split("\u0000");
      const sec = sections.get(execId);
      if (sec && sec.dag) sec.dag.update(name);
      if (cur && cur.exec === execId && cur.step === name) stepChanged = true;
    }
    const outputChanged = !!cur && state.dirtyOutputs.has(cur.exec + "\u0000" + cur.step);
    if (state.dirtyExecs.size) {
      for (const execId of state.dirtyExecs) {
        const sec = sections.get(execId);
        if (sec) sectionHead(sec, state.execs.get(execId));
      }
      drawTree();
    }
    if (state.dirtyExecs.size || state.dirtySteps.size) drawHeader();
    state.dirtySteps.clear();
    state.dirtyExecs.clear();
    state.dirtyOutputs.clear();
    panel.update(stepChanged, outputChanged);
    if (state.unknownExec) refetchTree();
    else if (state.settled) {
      state.settled = false;
      if (snapshotLive) refetchTree(); // for outputs, results, reasons
    }
  }

  function onEvents(events, at) {
    let waits = false;
    for (const e of events) {
      state.push(e);
      if (e.type === "step.waiting" || e.type === "signal.consumed") waits = true;
    }
    if (waits && !holding) refreshWaits(); // the navigation's count of open waits
    fresh.push(...events);
    const last = events[events.length - 1];
    const lastSeq = last.seq;
    batches.push({ n: events.length, at, lastSeq, lastTime: last.time });
    stats.received += events.length;
    stats.batches++;
    stats.lastSeqReceived = lastSeq;
    schedule();
  }

  /** Ends the hold once the replay caught up (or took too long) AND the root's DAG is drawn. */
  function release(force) {
    if (!holding) return;
    if (!rootDrawn && force !== true) {
      releaseWanted = true;
      return;
    }
    holding = false;
    clearTimeout(holdTimer);
    schedule();
  }

  function setStreamState(s) {
    const text = { connecting: "connecting\u2026", live: "\u25CF live", reconnecting: "connection lost, reconnecting\u2026", ended: "settled (stream ended)", error: "stream unavailable" }[s] || s;
    el.streamState.dataset.state = s;
    el.streamState.textContent = text;
  }

  function startStream() {
    if (stream) stream.close();
    clearInterval(watch);
    const after = stream ? stream.lastSeq() : 0;
    stream = followEvents(id, {
      after,
      onEvents,
      onState: setStreamState,
      onIdle: release,
      onEnd: () => {
        release();
        if (snapshotLive) refetchTree();
        watchSettled();
      },
    });
  }

  /** A settled tree has no stream: look every 5 s whether someone resumed it. */
  function watchSettled() {
    clearInterval(watch);
    watch = setInterval(async () => {
      try {
        const x = await api(`/v1/executions/${id}`);
        if (LIVE_STATUSES.has(x.status)) {
          startStream();
          refetchTree();
        }
      } catch { /* next time */ }
    }, 5000);
  }

  let refetching = false, refetchAgain = false;
  /** Reloads the tree, then re-applies the events that arrived meanwhile. */
  async function refetchTree() {
    if (refetching) { refetchAgain = true; return; }
    refetching = true;
    state.unknownExec = false;
    try {
      const mark = state.events.length;
      const tree = await api(`/v1/executions/${id}/tree`);
      if (closed) return;
      const changed = state.loadTree(tree);
      snapshotLive = LIVE_STATUSES.has(state.root().status);
      for (const e of state.events.slice(mark)) state.apply(e);
      if (changed) drawSections();
      drawTree();
      schedule();
      panel.refetch();
    } catch (e) {
      if (e.status !== 401) console.warn("tree:", e);
    } finally {
      refetching = false;
      if (refetchAgain && !closed) { refetchAgain = false; setTimeout(refetchTree, 250); }
    }
  }

  // ---- actions --------------------------------------------------------

  function setBusy(b) {
    busy = b;
    drawHeader();
  }

  function showOutcome(...content) {
    el.outcome.hidden = false;
    fill(el.outcome, ...content);
  }

  async function stopAction(mode) {
    const x = state.root();
    const force = mode === "force";
    const ok = await confirmDialog({
      title: force ? "Force stop this execution?" : "Stop this execution?",
      body: h("div", {},
        h("p", {}, `${x.graph} `, h("span", { class: "mono" }, x.id), " and every execution below it."),
        h("p", {}, force
          ? "Subprocesses get SIGKILL at once (no grace period). Running steps go back to pending; the snapshot is still written, so it can be resumed."
          : "Subprocesses get SIGINT, then SIGTERM and SIGKILL after their grace periods. Running steps go back to pending; it can be resumed later.")),
      confirm: force ? "Force stop" : "Stop",
      danger: true,
    });
    if (!ok) return;
    const before = new Map();
    for (const eid of state.order)
      for (const [name, s] of Object.entries(state.execs.get(eid).steps || {})) before.set(eid + "\u0000" + name, s.status);
    setBusy(true);
    showOutcome(h("p", {}, force ? "Force stopping\u2026" : "Stopping\u2026 (waiting up to 15 s for the snapshot)"));
    try {
      const { status, data } = await request(`/v1/executions/${id}/stop`, { method: "POST", body: { mode, wait: 15 } });
      await refetchTree();
      showOutcome(stopOutcome(data, before, state),
        status === 202 ? h("p", { class: "muted" }, "Still stopping: the page follows it live.") : null);
    } catch (e) {
      showOutcome(h("p", { class: "error" }, `Stop failed: ${errorText(e)}`));
    } finally {
      setBusy(false);
    }
  }

  async function resumeAction() {
    const x = state.root();
    const ok = await confirmDialog({
      title: "Resume this execution?",
      body: h("p", {}, `${x.graph} `, h("span", { class: "mono" }, x.id),
        " continues from its snapshot: completed steps keep their results and do not run again; pending and failed steps run."),
      confirm: "Resume",
    });
    if (!ok) return;
    setBusy(true);
    showOutcome(h("p", {}, "Resuming\u2026"));
    try {
      const doc = await api(`/v1/executions/${id}/resume`, { method: "POST", body: {} });
      const done = Object.values(doc.steps || {}).filter((s) => s.status === "completed").length;
      showOutcome(h("p", {}, h("strong", {}, "Resumed"), ": the execution is ", badge(doc.status, "outcome-status"),
        `; ${done} completed step${done === 1 ? "" : "s"} kept, not run again.`));
      startStream();
      await refetchTree();
    } catch (e) {
      showOutcome(h("p", { class: "error" }, `Resume failed: ${errorText(e)}`));
    } finally {
      setBusy(false);
    }
  }

  // ---- start ----------------------------------------------------------

  async function init() {
    let tree;
    try {
      tree = await api(`/v1/executions/${id}/tree`);
    } catch (e) {
      if (e.status === 401) return;
      el.error.textContent = e.status === 404 ? `No execution ${id} (or it is not yours).` : `Cannot load the execution: ${errorText(e)}`;
      el.error.hidden = false;
      setStreamState("error");
      return;
    }
    if (closed) return;
    stats.treeLoadedAt = performance.now();
    performance.mark("canopy:tree-loaded");
    state.loadTree(tree);
    snapshotLive = LIVE_STATUSES.has(state.root().status);
    state.dirtySteps.clear();
    state.dirtyExecs.clear();
    drawHeader();
    drawTree();
    drawSections(); // starts the stream once the root's DAG is drawn
  }
  init();

  /** The countdowns of the waiting steps' nodes. */
  function tickWaits() {
    for (const [execId, sec] of sections) {
      if (!sec.dag) continue;
      const x = state.execs.get(execId);
      for (const [name, s] of Object.entries((x && x.steps) || {})) if (s.status === "waiting") sec.dag.update(name);
    }
  }

  const tick = setInterval(() => {
    if (!busy) drawHeader();
    tickWaits();
  }, 1000);
  return () => {
    closed = true;
    if (stream) stream.close();
    clearInterval(watch);
    clearInterval(tick);
    clearTimeout(holdTimer);
    if (raf) cancelAnimationFrame(raf);
  };
}
