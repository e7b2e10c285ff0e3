// dag.js: lays out the steps of one execution as the DAG of their `needs`,
// left to right, and draws it as SVG once; afterwards only classes and two
// short texts per node change. Layering is hand-written: a step's layer is
// the longest path from a root; within a layer steps are ordered by the
// barycenter of their predecessors. A layer taller than MAX_ROWS wraps into
// several sub-columns so a wide graph stays readable. Keyboard: one tab
// stop per DAG, arrow keys move between steps, Enter/Space selects.

import { STATUS_ICON } from "./ui.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 172, H = 40, COL_W = 212, ROW_H = 50, PAD = 14, MAX_ROWS = 30;

/**
 * steps: [{name, needs: [names]}] in graph order. Returns
 * {pos: Map(name -> {x, y, layer}), edges: [[from, to]], width, height}.
 */
export function layout(steps) {
  const index = new Map(steps.map((s, i) => [s.name, i]));
  const preds = steps.map((s) => (s.needs || []).filter((n) => index.has(n)).map((n) => index.get(n)));
  const succs = steps.map(() => []);
  preds.forEach((ps, i) => ps.forEach((p) => succs[p].push(i)));

  // Longest path from a root, in topological order (Kahn).
  const layer = new Array(steps.length).fill(0);
  const indeg = preds.map((ps) => ps.length);
  const queue = [];
  indeg.forEach((d, i) => { if (d === 0) queue.push(i); });
  for (let q = 0; q < queue.length; q++) {
    const u = queue[q];
    for (const v of succs[u]) {
      layer[v] = Math.max(layer[v], layer[u] + 1);
      if (--indeg[v] === 0) queue.push(v);
    }
  }
  const layers = [];
  steps.forEach((_, i) => (layers[layer[i]] ||= []).push(i));
  for (let l = 0; l < layers.length; l++) layers[l] ||= [];

  // Rows and sub-columns per layer; every layer is centred on the tallest.
  const shape = layers.map((ids) => {
    const cols = Math.max(1, Math.ceil(ids.length / MAX_ROWS));
    return { cols, rows: Math.ceil(ids.length / cols) };
  });
  const maxRows = Math.max(1, ...shape.map((s) => s.rows));
  const rowOf = new Float64Array(steps.length);
  const pos = new Map();
  let x = PAD;
  layers.forEach((ids, l) => {
    if (l > 0) {
      const bary = new Map();
      for (const i of ids) {
        const ps = preds[i];
        bary.set(i, ps.length ? ps.reduce((a, p) => a + rowOf[p], 0) / ps.length : Infinity);
      }
      ids.sort((a, b) => bary.get(a) - bary.get(b) || a - b);
    }
    const { cols, rows } = shape[l];
    const offset = (maxRows - rows) / 2;
    ids.forEach((i, k) => {
      const col = Math.floor(k / rows), row = (k % rows) + offset;
      rowOf[i] = row;
      pos.set(steps[i].name, { x: x + col * COL_W, y: PAD + row * ROW_H, layer: l });
    });
    x += cols * COL_W;
  });
  const edges = [];
  preds.forEach((ps, i) => ps.forEach((p) => edges.push([steps[p].name, steps[i].name])));
  return { pos, edges, width: x - (COL_W - W) + PAD, height: PAD * 2 + maxRows * ROW_H - (ROW_H - H) };
}

function edgePath(a, b) {
  const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
  const dx = Math.max(24, (x2 - x1) / 2);
  return `M${x1} ${y1}C${x1 + dx} ${y1} ${x2 - dx} ${y2} ${x2} ${y2}`;
}

function svgEl(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  return el;
}

function clip(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "\u2026" : text;
}

/**
 * Draws the DAG. opts: {execId, label(name) -> {status, text, short?}, onSelect(name)};
 * a node shows `short` (else `text`) clipped, its tooltip and label `text`.
 * Returns {el, update(name), select(name), nodes}.
 */
export function drawDag(steps, opts) {
  const lay = layout(steps);
  const svg = svgEl("svg", {
    class: "dag", width: lay.width, height: lay.height, viewBox: `0 0 ${lay.width} ${lay.height}`,
    role: "group", "aria-label": `steps of ${opts.execId || "the graph"}`,
  });
  const edges = svgEl("path", { class: "edges", d: lay.edges.map(([a, b]) => edgePath(lay.pos.get(a), lay.pos.get(b))).join("") });
  const selEdges = svgEl("path", { class: "edges-sel", d: "" });
  svg.append(edges, selEdges);
  const nodes = new Map();
  const frag = document.createDocumentFragment();
  for (const s of steps) {
    const p = lay.pos.get(s.name);
    const g = svgEl("g", {
      class: "node", transform: `translate(${p.x},${p.y})`, tabindex: "-1", role: "button",
      "data-testid": "step-node", "data-step": s.name, "data-exec": opts.execId || "",
    });
    const title = svgEl("title", {});
    const icon = svgEl("text", { class: "icon", x: 9, y: 17 });
    const name = svgEl("text", { class: "name", x: 26, y: 17 });
    name.textContent = clip(s.name, 20);
    const stat = svgEl("text", { class: "stat", x: 26, y: 32 });
    g.append(title, svgEl("rect", { width: W, height: H, rx: 6 }), icon, name, stat);
    frag.append(g);
    nodes.set(s.name, { g, icon, stat, title, status: null, text: null });
  }
  svg.append(frag);

  const edgesOf = (name) => lay.edges.filter(([a, b]) => a === name || b === name)
    .map(([a, b]) => edgePath(lay.pos.get(a), lay.pos.get(b))).join("");

  function update(name) {
    const n = nodes.get(name);
    if (!n) return;
    const { status, text, short } = opts.label(name);
    if (status === n.status && text === n.text) return;
    if (status !== n.status) {
      n.g.setAttribute("class", `node st-${status}${n.g.classList.contains("sel") ? " sel" : ""}`);
      n.g.setAttribute("data-status", status);
      n.icon.textContent = STATUS_ICON[status] || "\u25C7";
    }
    n.stat.textContent = clip(short || text, 27);
    n.title.textContent = `${name}: ${text}`;
    n.g.setAttribute("aria-label", `step ${name}: ${text}`);
    n.status = status;
    n.text = text;
  }
  let selected = null;
  function select(name) {
    if (selected && nodes.has(selected)) nodes.get(selected).g.classList.remove("sel");
    selected = name;
    if (name && nodes.has(name)) {
      nodes.get(name).g.classList.add("sel");
      selEdges.setAttribute("d", edgesOf(name));
    } else selEdges.setAttribute("d", "");
  }
  const pick = (ev) => {
    const g = ev.target.closest && ev.target.closest("g.node");
    if (g) opts.onSelect && opts.onSelect(g.getAttribute("data-step"));
  };
  svg.addEventListener("click", pick);

  // One tab stop per DAG (roving tabindex); arrows move in reading order
  // (columns left to right, top to bottom), Enter or Space selects.
  const order = [...steps].sort((a, b) => {
    const p = lay.pos.get(a.name), q = lay.pos.get(b.name);
    return p.x - q.x || p.y - q.y;
  }).map((s) => s.name);
  let focusIndex = 0;
  const focusable = (i) => {
    nodes.get(order[focusIndex]).g.setAttribute("tabindex", "-1");
    focusIndex = Math.max(0, Math.min(order.length - 1, i));
    const g = nodes.get(order[focusIndex]).g;
    g.setAttribute("tabindex", "0");
    return g;
  };
  if (order.length) focusable(0);
  const moves = { ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1 };
  svg.addEventListener("keydown", (ev) => {
    const g = ev.target.closest && ev.target.closest("g.node");
    if (!g) return;
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      pick(ev);
    } else if (ev.key in moves || ev.key === "Home" || ev.key === "End") {
      ev.preventDefault();
      const here = order.indexOf(g.getAttribute("data-step"));
      const to = ev.key === "Home" ? 0 : ev.key === "End" ? order.length - 1 : here + moves[ev.key];
      focusable(to).focus();
    }
  });
  svg.addEventListener("focusin", (ev) => {
    const g = ev.target.closest && ev.target.closest("g.node");
    if (g) focusable(order.indexOf(g.getAttribute("data-step")));
  });
  for (const s of steps) update(s.name);
  return { el: svg, update, select, nodes };
}
