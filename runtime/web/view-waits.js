// view-waits.js: the inbox (#/waits): a card per wait the user may answer
// (GET /v1/waits, the same poll as the navigation's count): its execution,
// step path, prompt and a live countdown to its deadline; a button per
// `options` entry, or else a form made from its `schema`; and "Fail…".
// An answer shows what the server said (taken by a step, buffered, or its
// error with the JSON path) and keeps what was typed. Cards stay until the
// page is left, also when their wait ends elsewhere (then marked so).

import { h, fill, shortId, timeEl, errorText, confirmDialog } from "./ui.js";
import { onWaits, refreshWaits, answerWait, timeLeft, formModel, initialRaw, optionText, buildValue } from "./waits.js";

const keyOf = (w) => `${w.execution_id}\u0000${w.step}\u0000${w.armed_at || ""}`;
let cardSeq = 0; // unique ids for the form fields' labels

/** The controls of one field of a generated form; read() gives its raw state. */
function fieldControl(f, id) {
  const init = initialRaw(f);
  const common = { id, name: f.name === null ? "value" : f.name, "data-testid": "wait-field", "data-field": f.name === null ? "" : f.name,
    "data-kind": f.kind, "aria-required": f.required ? "true" : null, "aria-describedby": f.hint ? `${id}-hint` : null };
  let input;
  switch (f.kind) {
    case "boolean":
      input = h("input", { ...common, type: "checkbox", checked: init });
      return { input, read: () => input.checked, inline: true };
    case "enum":
      input = h("select", common,
        init === "" || !f.required ? h("option", { value: "" }, f.required ? "choose\u2026" : "\u2014 (none)") : null,
        f.options.map((o, i) => h("option", { value: String(i), selected: String(i) === init }, optionText(o))));
      input.value = init;
      return { input, read: () => input.value };
    case "number":
    case "integer":
      input = h("input", { ...common, type: "number", step: f.kind === "integer" ? "1" : "any", min: f.min, max: f.max, value: init, inputmode: f.kind === "integer" ? "numeric" : "decimal" });
      return { input, read: () => input.value };
    case "string":
      input = h("input", { ...common, type: "text", value: init, autocomplete: "off" });
      return { input, read: () => input.value };
    case "text":
      input = h("textarea", { ...common, rows: "3" });
      input.value = init;
      return { input, read: () => input.value };
    default: // json
      input = h("textarea", { ...common, rows: "3", class: "mono", spellcheck: "false", placeholder: "JSON" });
      input.value = init;
      return { input, read: () => input.value };
  }
}

/**
 * One wait's card. Returns {el, wait, tick(now), gone(), answered()}.
 * onAnswered() is called after the server answered (any answer).
 */
export function waitCard(wait, { onAnswered = () => {} } = {}) {
  const n = ++cardSeq;
  const options = wait.options && typeof wait.options === "object" ? Object.keys(wait.options) : [];
  const countdown = h("span", { class: "countdown", "data-testid": "wait-countdown", "data-deadline": wait.deadline || "" }, timeLeft(wait.deadline));
  const answer = h("div", { class: "answer", "data-testid": "wait-answer", role: "status", "aria-live": "polite" });
  answer.hidden = true;
  const controls = []; // disabled while sending and once answered
  let state = "open";
  let done = false;

  const el = h("article", {
    class: "card wait-card", "data-testid": "wait-card", "data-exec": wait.execution_id, "data-root": wait.root_id,
    "data-step": wait.step, "data-path": wait.path, "data-signal": wait.signal, "data-state": state,
    "aria-labelledby": `wait-${n}-title`,
  });

  function setState(s) {
    state = s;
    el.dataset.state = s;
    const off = s === "sending" || done;
    for (const c of controls) c.disabled = off;
  }

  function show(kind, ...content) {
    answer.hidden = false;
    answer.className = `answer ${kind}`;
    fill(answer, ...content);
  }

  /** onRefused(path): the form marks the field the server named. */
  async function send(body, what, onRefused = () => {}) {
    if (state === "sending" || done) return;
    setState("sending");
    show("pending", `Sending ${what}\u2026`);
    try {
      const { status, data } = await answerWait(wait, body);
      done = true;
      if (status === 200 && data && data.consumed_by) {
        const by = data.consumed_by;
        setState("consumed");
        answer.dataset.result = "consumed";
        show("ok", h("strong", {}, "Answered: "), `${what}, taken by step `,
          h("span", { class: "mono", "data-testid": "wait-taken-by" }, by.step),
          by.execution_id && by.execution_id !== wait.root_id ? [" of ", h("a", { href: `#/executions/${by.execution_id}`, class: "mono" }, shortId(by.execution_id))] : null,
          ".");
      } else {
        setState("buffered");
        answer.dataset.result = "buffered";
        show("ok", h("strong", {}, "Buffered: "), `${what} is stored; no wait has taken it yet (the next wait armed for `,
          h("code", {}, wait.signal), " takes it).");
      }
    } catch (e) {
      if (e.status === 401) return;
      setState("error");
      answer.dataset.result = "error";
      answer.dataset.path = e.path || "";
      show("error", h("strong", {}, "Not taken: "), h("span", { "data-testid": "wait-error" }, errorText(e)));
      onRefused(e.path || "");
    }
    onAnswered();
  }

  const failBtn = h("button", { type: "button", class: "btn danger", "data-testid": "wait-fail", onclick: failAction }, "Fail\u2026");
  controls.push(failBtn);

  // The answer controls: the options' buttons, or the schema's form.
  let body;
  if (options.length) {
    body = h("div", { class: "actions" },
      h("div", { class: "actions wait-options", role: "group", "aria-label": "Answers" },
        options.map((label) => {
          const b = h("button", { type: "button", class: "btn primary", "data-testid": "wait-option", "data-label": label,
            title: JSON.stringify(wait.options[label]), onclick: () => send({ value: wait.options[label] }, `\u201c${label}\u201d`) }, label);
          controls.push(b);
          return b;
        })),
      failBtn);
  } else {
    const model = formModel(wait.schema);
    const fields = model.fields.map((f, i) => ({ f, ...fieldControl(f, `wait-${n}-f${i}`) }));
    const submit = h("button", { type: "submit", class: "btn primary", "data-testid": "wait-submit" }, "Send");
    controls.push(submit, ...fields.map((x) => x.input));
    const form = h("form", { class: "wait-form", "data-testid": "wait-form", novalidate: true },
      fields.map(({ f, input, inline }) => {
        const id = input.id;
        const label = h("label", { for: id }, f.label, f.required && !model.whole ? h("span", { class: "req", title: "required" }, " *") : null);
        const hint = f.hint ? h("span", { class: "hint muted small", id: `${id}-hint` }, f.hint) : null;
        return inline
          ? h("div", { class: "field inline" }, input, label, hint)
          : h("div", { class: "field" }, label, input, hint);
      }),
      h("div", { class: "actions" }, submit, failBtn,
        !model.whole && model.fields.some((f) => f.required) ? h("span", { class: "muted small" }, "* required") : null));
    // The field a JSON path names ("/value/priority"; "/value" for the whole).
    const fieldAt = (path) => {
      if (!path.startsWith("/value")) return null;
      if (model.whole) return fields[0];
      const name = (path.split("/")[2] || "").replace(/~1/g, "/").replace(/~0/g, "~");
      return fields.find((x) => x.f.name === name) || null;
    };
    const mark = (x) => {
      for (const y of fields) y.input.removeAttribute("aria-invalid");
      if (!x) return;
      x.input.setAttribute("aria-invalid", "true");
      x.input.focus();
    };
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      mark(null);
      const raw = {};
      for (const { f, read } of fields) raw[f.name === null ? "" : f.name] = read();
      const built = buildValue(model, raw);
      if (!built.ok) {
        setState("error");
        answer.dataset.result = "error";
        answer.dataset.path = "";
        show("error", h("strong", {}, "Not sent: "), h("span", { "data-testid": "wait-error" }, built.message));
        mark(fields.find((x) => x.f.name === built.field));
        return;
      }
      send({ value: built.value }, "the form", (path) => mark(fieldAt(path)));
    });
    body = form;
  }

  async function failAction() {
    if (state === "sending" || done) return;
    const message = h("textarea", { id: `wait-${n}-fail`, rows: "3", maxlength: "2000", "data-testid": "wait-fail-message" });
    const ok = await confirmDialog({
      title: "Fail this wait?",
      body: h("div", {},
        h("p", {}, "The step ", h("span", { class: "mono" }, wait.path), " fails with reason ", h("code", {}, "rejected"),
          "; its execution then fails unless the graph handles it."),
        h("label", { for: message.id }, "Message (optional)"), message),
      confirm: "Fail it",
      danger: true,
      focus: message,
    });
    if (!ok) return;
    send({ fail: { message: message.value } }, "the failure");
  }

  fill(el,
    h("h2", { id: `wait-${n}-title`, "data-testid": "wait-prompt" }, wait.prompt || `Waiting for signal ${wait.signal}`),
    h("p", { class: "wait-meta muted small" },
      "Execution ", h("a", { href: `#/executions/${wait.execution_id}`, class: "mono", "data-testid": "wait-exec-link" }, shortId(wait.execution_id)),
      wait.root_id && wait.root_id !== wait.execution_id ? [" (in ", h("a", { href: `#/executions/${wait.root_id}`, class: "mono" }, shortId(wait.root_id)), ")"] : null,
      " \u00b7 step ", h("span", { class: "mono", "data-testid": "wait-path" }, wait.path),
      " \u00b7 signal ", h("code", {}, wait.signal),
      wait.armed_at ? [" \u00b7 since ", timeEl(wait.armed_at)] : null),
    h("p", { class: "wait-deadline" }, countdown,
      wait.deadline ? [h("span", { class: "muted small" }, " \u00b7 deadline "), timeEl(wait.deadline),
        h("span", { class: "muted small" }, wait.on_timeout === "default" ? " (then its default answer)" : " (then the step fails)")] : null),
    body,
    answer);

  return {
    el,
    wait,
    answered: () => done,
    tick(now) {
      countdown.textContent = timeLeft(wait.deadline, now);
      countdown.classList.toggle("passed", !!wait.deadline && Date.parse(wait.deadline) <= now);
    },
    /** The wait is no longer listed (answered elsewhere, timed out, stopped). */
    gone() {
      if (done) return;
      done = true;
      setState("gone");
      show("muted", "No longer waiting: answered elsewhere, timed out, or its execution stopped. ",
        h("a", { href: `#/executions/${wait.execution_id}` }, "See the execution"), ".");
    },
  };
}

export function waitsView(main, _params, query) {
  const want = { exec: query.get("exec") || "", step: query.get("step") || "" };
  const list = h("div", { class: "wait-list", "data-testid": "wait-list" });
  const empty = h("p", { class: "muted", "data-testid": "waits-empty" }, "Nothing is waiting for an answer from you.");
  empty.hidden = true;
  const note = h("p", { class: "muted small", "data-testid": "waits-updated" }, "Loading\u2026");
  const error = h("p", { class: "error", role: "alert" });
  error.hidden = true;
  const cards = new Map(); // key -> card
  let focused = false;

  fill(main,
    h("div", { class: "title-row" }, h("h1", {}, "Waiting for you"),
      h("button", { type: "button", class: "btn small", "data-testid": "waits-refresh", onclick: () => refreshWaits() }, "Refresh")),
    h("p", { class: "muted" }, "The ", h("code", {}, "wait"), " steps you may answer, oldest first. An answer is checked against the wait's schema when sent."),
    error, list, empty, note);

  function draw({ items, error: e, at }) {
    error.hidden = !e;
    if (e) error.textContent = `Cannot load the waits: ${errorText(e)}`;
    const listed = new Set();
    for (const w of items) {
      const key = keyOf(w);
      listed.add(key);
      if (cards.has(key)) continue;
      // A wait armed again (a resume): its old card goes if it was never answered.
      for (const [k, c] of cards)
        if (c.wait.execution_id === w.execution_id && c.wait.step === w.step && c.el.dataset.state === "gone") {
          c.el.remove();
          cards.delete(k);
        }
      const card = waitCard(w, { onAnswered: () => refreshWaits() });
      cards.set(key, card);
      list.append(card.el);
    }
    if (!e) for (const [key, c] of cards) if (!listed.has(key)) c.gone();
    empty.hidden = cards.size > 0;
    note.textContent = `Updated ${new Date(at).toLocaleTimeString(undefined, { hour12: false })} (every 15 s, and after each answer)`;
    if (!focused && want.exec) {
      const c = [...cards.values()].find((x) => x.wait.execution_id === want.exec && (!want.step || x.wait.step === want.step));
      if (c) {
        focused = true;
        c.el.classList.add("target");
        c.el.scrollIntoView({ block: "center" });
        const first = c.el.querySelector("button, input, select, textarea");
        if (first) first.focus();
      }
    }
  }

  const unsubscribe = onWaits(draw);
  refreshWaits(); // the page opened: the current list, not the last poll's
  const tick = setInterval(() => {
    const now = Date.now();
    for (const c of cards.values()) c.tick(now);
  }, 1000);
  return () => {
    unsubscribe();
    clearInterval(tick);
  };
}
