#!/usr/bin/python3
"""test_units.py: the dashboard's pure functions, run inside the browser.

- api.js sseParser: the same stream cut at every possible byte gives the
  same messages (ids, event names, multi-line data, retry, comments, CRLF).
- dag.js layout: layer = longest path from a root, order in a layer by the
  barycenter of the predecessors, a layer over 30 steps wraps.
- ui.js fmtDuration.
- ui.js refill: a redraw keeps the nodes it repeats (the same element for
  an unchanged link), updates text and attributes in place, and matches
  list items by data-id (one put first, one dropped, one changed).
- exec-state.js: a step.signalled event shows on its running step as the
  CLI shows it ("SIGINT sent · SIGTERM in 9s", counting down), not for
  another attempt, and goes with the step's next status.
- ui.js confirmDialog: a dialog opened again before the close event of the
  one cancelled just before it is dispatched (a quick Escape, Enter) answers
  for itself: the late close event neither confirms nor cancels it.
- waits.js: the countdown to a deadline as the CLI writes it ("23h59m
  left", "deadline passed"), a waiting step's label and its short form for
  a DAG node, the form a schema becomes (a field per property and its kind,
  required, hints, defaults; one field for any other schema) and the value
  built from the fields (left out when empty, a checkbox always, an enum by
  its index, numbers and JSON parsed, what cannot be read named).
- exec-state.js: step.waiting makes a step `waiting` with its signal,
  deadline and prompt; signal.received and signal.consumed change no
  status; a step document's wait `signal` is not taken for a POSIX one.
"""

from harness import main

SCRIPT = r"""
const done = arguments[arguments.length - 1];
(async () => {
  const { sseParser } = await import('/ui/api.js');
  const { layout } = await import('/ui/dag.js');
  const { fmtDuration } = await import('/ui/ui.js');
  const fails = [];
  const check = (ok, what) => { if (!ok) fails.push(what); };

  // SSE
  const text = 'retry: 3000\r\n\r\n: a comment\nid: 7\nevent: step.started\ndata: {"seq":7}\n\n' +
    'id: 8\nevent: step.output\ndata: line one\ndata: line two\n\nevent: end\ndata: {"last_seq":8}\n\n';
  const parse = (chunks) => { const out = []; const feed = sseParser((m) => out.push(m)); chunks.forEach(feed); return JSON.stringify(out); };
  const whole = parse([text]);
  const want = JSON.stringify([
    { id: null, event: 'message', data: '', retry: 3000 },
    { id: '7', event: 'step.started', data: '{"seq":7}', retry: null },
    { id: '8', event: 'step.output', data: 'line one\nline two', retry: null },
    { id: null, event: 'end', data: '{"last_seq":8}', retry: null }]);
  check(whole === want, 'sse whole: ' + whole);
  for (let i = 1; i < text.length; i++) {
    const got = parse([text.slice(0, i), text.slice(i)]);
    if (got !== want) { fails.push('sse cut at ' + i + ': ' + got); break; }
  }
  check(parse(text.split('')) === want, 'sse byte by byte');

  // layout: a diamond plus a tail; layers by longest path
  const steps = [
    { name: 'd', needs: ['b', 'c'] }, { name: 'a', needs: [] }, { name: 'b', needs: ['a'] },
    { name: 'c', needs: ['a'] }, { name: 'e', needs: ['a', 'd'] }, { name: 'lone', needs: [] }];
  const L = layout(steps);
  const layer = (n) => L.pos.get(n).layer;
  check(layer('a') === 0 && layer('lone') === 0 && layer('b') === 1 && layer('c') === 1 && layer('d') === 2 && layer('e') === 3,
    'layers ' + JSON.stringify(steps.map((s) => [s.name, layer(s.name)])));
  check(L.edges.length === 6, 'edges ' + L.edges.length);
  check(L.pos.get('a').x < L.pos.get('b').x && L.pos.get('b').x < L.pos.get('d').x && L.pos.get('d').x < L.pos.get('e').x, 'left to right');

  // barycenter: children follow their parents' order
  const bs = [{ name: 'p1', needs: [] }, { name: 'p2', needs: [] }, { name: 'p3', needs: [] },
    { name: 'c3', needs: ['p3'] }, { name: 'c1', needs: ['p1'] }, { name: 'c2', needs: ['p2'] }, { name: 'c13', needs: ['p1', 'p3'] }];
  const B = layout(bs);
  const y = (n) => B.pos.get(n).y;
  // c13's barycenter (rows 0 and 2) ties with c2's (row 1): graph order breaks the tie
  check(y('c1') < y('c2') && y('c2') < y('c13') && y('c13') < y('c3'), 'barycenter order ' + ['c1', 'c2', 'c3', 'c13'].map((n) => n + '=' + y(n)));

  // wrap: 65 independent steps -> 3 sub-columns of at most 30 rows
  const wide = Array.from({ length: 65 }, (_, i) => ({ name: 's' + i, needs: [] }));
  const W = layout(wide);
  const xs = new Set(wide.map((s) => W.pos.get(s.name).x));
  check(xs.size === 3, 'wrapped into ' + xs.size + ' columns');
  check(Math.max(...wide.map((s) => W.pos.get(s.name).y)) < 30 * 50 + 20, 'at most 30 rows');
  const pos = new Set(wide.map((s) => W.pos.get(s.name).x + ',' + W.pos.get(s.name).y));
  check(pos.size === 65, 'no two steps at one place');

  // a cycle (never valid, but the layout must not hang)
  const C = layout([{ name: 'x', needs: ['y'] }, { name: 'y', needs: ['x'] }]);
  check(C.pos.size === 2, 'cycle laid out');

  // step.signalled
  const { ExecState, signalText } = await import('/ui/exec-state.js');
  const st = new ExecState('r');
  st.loadTree({ id: 'r', depth: 0, steps: { s: { status: 'pending', attempt: 0 } }, children: [] });
  const t = (sec) => '2026-01-01T00:00:' + String(sec).padStart(2, '0') + '.000Z';
  const ev = (seq, type, extra) => Object.assign({ seq, type, execution_id: 'r', step: 's', time: t(seq) }, extra);
  st.push(ev(1, 'step.started', { status: 'running', data: { attempt: 1 } }));
  const step = () => st.execs.get('r').steps.s;
  check(signalText(step().signal) === null, 'no signal before one is sent');
  st.push(ev(2, 'step.signalled', { data: { attempt: 1, signal: 'SIGINT', next: 'SIGTERM', next_in_ms: 10000 } }));
  check(step().status === 'running', 'signalled changes no status: ' + step().status);
  check(signalText(step().signal, Date.parse(t(3))) === 'SIGINT sent \u00b7 SIGTERM in 9s', 'countdown: ' + signalText(step().signal, Date.parse(t(3))));
  check(signalText(step().signal, Date.parse(t(30))) === 'SIGINT sent \u00b7 SIGTERM in 0s', 'countdown ends at 0');
  st.push(ev(4, 'step.signalled', { data: { attempt: 7, signal: 'SIGKILL', next: null, next_in_ms: null } }));
  check(step().signal.signal === 'SIGINT', 'another attempt\'s signal is ignored');
  st.push(ev(5, 'step.signalled', { data: { attempt: 1, signal: 'SIGKILL', next: null, next_in_ms: null } }));
  check(signalText(step().signal) === 'SIGKILL sent', 'last signal: ' + signalText(step().signal));
  st.push(ev(6, 'step.pending', { status: 'pending', reason: 'requested' }));
  check(step().signal === null && step().reason === 'requested', 'the next status ends the signal');

  // a model's answer: its pieces joined, a line per line break
  st.push(ev(7, 'step.output', { data: { stream: 'model', text: 'Hel' } }));
  st.push(ev(8, 'step.output', { data: { stream: 'model', text: 'lo\nwor' } }));
  st.push(ev(9, 'step.output', { data: { stream: 'model', text: 'ld' } }));
  const said = (st.outputs.get('r\u0000s') || []).map((l) => l.line);
  check(JSON.stringify(said) === '["Hello","world"]', 'model text joined: ' + JSON.stringify(said));
  st.push(ev(10, 'step.started', { status: 'running', data: { attempt: 2 } }));
  st.push(ev(11, 'step.output', { data: { stream: 'model', text: 'again' } }));
  const again = (st.outputs.get('r\u0000s') || []).map((l) => l.line);
  check(JSON.stringify(again) === '["Hello","world","again"]', 'a new attempt, a new answer: ' + JSON.stringify(again));

  // confirmDialog: the browser dispatches a dialog's close event later, as
  // a task; a dialog opened again in between must not take it for its own.
  const { confirmDialog } = await import('/ui/ui.js');
  const first = confirmDialog({ title: 'one', body: '', confirm: 'Yes' });
  document.querySelector('[data-testid=confirm-dialog]').close('no'); // Escape: close queued
  const second = confirmDialog({ title: 'two', body: '', confirm: 'Yes' });
  await new Promise((r) => setTimeout(r, 0)); // the first close event is dispatched
  check(document.querySelector('[data-testid=confirm-dialog]').open, 'the second dialog stays open');
  document.querySelector('[data-testid=confirm-yes]').click();
  const answers = await Promise.race([Promise.all([first, second]),
    new Promise((r) => setTimeout(() => r('unanswered'), 2000))]);
  check(JSON.stringify(answers) === '[false,true]', 'cancel, then confirm: ' + JSON.stringify(answers));

  // waits.js: countdown, label, form model, value
  const W8 = await import('/ui/waits.js');
  const base = Date.parse('2026-01-01T00:00:00.000Z');
  const at = (ms) => new Date(base + ms).toISOString();
  const H = 3600000, M = 60000;
  for (const [ms, want] of [[24 * H - 30000, '23h59m left'], [4 * M + 5000, '4m05s left'], [12500, '12s left'], [4500, '4.5s left'],
    [850, '850ms left'], [51 * H, '2d03h left'], [0, 'deadline passed'], [-5000, 'deadline passed']])
    check(W8.timeLeft(at(ms), base) === want, `timeLeft ${ms}: ${W8.timeLeft(at(ms), base)}`);
  check(W8.timeLeft(null, base) === 'no deadline', 'timeLeft without a deadline');
  let L1 = W8.waitLabel('approval', at(24 * H - 30000), base);
  check(L1.text === 'waiting \u00b7 approval \u00b7 23h59m left' && L1.short === 'waiting \u00b7 approval \u00b7 23h59m', 'waitLabel: ' + JSON.stringify(L1));
  L1 = W8.waitLabel('ok', at(12500), base);
  check(L1.text === 'waiting \u00b7 ok \u00b7 12s left' && L1.short === L1.text, 'waitLabel fits: ' + JSON.stringify(L1));
  L1 = W8.waitLabel('a-rather-long-signal-name', at(24 * H - 30000), base);
  check(L1.short === 'waiting \u00b7 a-rathe\u2026 \u00b7 23h59m' && L1.short.length === 27 && L1.text.endsWith('23h59m left'),
    'waitLabel long keeps the countdown: ' + JSON.stringify(L1));
  L1 = W8.waitLabel('approval', at(-1), base);
  check(L1.text === 'waiting \u00b7 approval \u00b7 deadline passed' && L1.short === 'waiting \u00b7 deadline passed', 'waitLabel passed: ' + JSON.stringify(L1));

  const schema = { type: 'object', required: ['urgent', 'team', 'summary'], properties: {
    urgent: { type: 'boolean', default: true },
    summary: { type: 'string', minLength: 5, maxLength: 500, description: 'What happened' },
    title: { type: 'string', maxLength: 80, title: 'Title' },
    team: { enum: ['infra', 'web', 'data'] },
    priority: { type: 'integer', minimum: 1, maximum: 5 },
    ratio: { type: 'number', exclusiveMinimum: 0 },
    level: { enum: [1, 2, 3], default: 2 },
    tags: { type: 'array', items: { type: 'string' } },
    meta: { type: 'object' },
    either: { type: ['string', 'null'] },
    fixed: { const: 'yes' } } };
  const fm = W8.formModel(schema);
  const kinds = fm.fields.map((f) => f.name + ':' + f.kind + (f.required ? '*' : '')).join(' ');
  check(!fm.whole && kinds === 'urgent:boolean* summary:text* team:enum* title:string priority:integer ratio:number level:enum tags:json meta:json either:json fixed:enum',
    'formModel kinds: ' + kinds);
  const byName = Object.fromEntries(fm.fields.map((f) => [f.name, f]));
  check(byName.summary.hint === 'What happened \u2014 5 to 500 characters', 'summary hint: ' + byName.summary.hint);
  check(byName.priority.hint === 'a whole number, 1 to 5' && byName.priority.min === 1 && byName.priority.max === 5, 'priority hint: ' + byName.priority.hint);
  check(byName.ratio.hint === 'over 0', 'ratio hint: ' + byName.ratio.hint);
  check(byName.title.label === 'Title' && byName.team.label === 'team', 'labels');
  check(W8.initialRaw(byName.urgent) === true && W8.initialRaw(byName.level) === '1' && W8.initialRaw(byName.team) === '' &&
    W8.initialRaw(byName.fixed) === '' && W8.initialRaw(byName.priority) === '', 'initial raw states');
  check(W8.optionText('web') === 'web' && W8.optionText(2) === '2' && W8.optionText(null) === 'null', 'option texts');
  const raw = { urgent: false, summary: 'disk full', title: '', team: '2', priority: ' 3 ', ratio: '', level: '2', tags: '["a", "b"]', meta: '', either: 'null', fixed: '0' };
  let bv = W8.buildValue(fm, raw);
  check(bv.ok && JSON.stringify(bv.value) === JSON.stringify({ urgent: false, summary: 'disk full', team: 'data', priority: 3, level: 3, tags: ['a', 'b'], either: null, fixed: 'yes' }),
    'buildValue: ' + JSON.stringify(bv));
  bv = W8.buildValue(fm, { ...raw, priority: 'x' });
  check(!bv.ok && bv.field === 'priority' && bv.message === 'priority: "x" is not a number', 'buildValue number: ' + JSON.stringify(bv));
  bv = W8.buildValue(fm, { ...raw, tags: '[1,' });
  check(!bv.ok && bv.field === 'tags' && bv.message.startsWith('tags: not valid JSON'), 'buildValue JSON: ' + JSON.stringify(bv));
  bv = W8.buildValue(fm, { ...raw, priority: '9', summary: '' });
  check(bv.ok && bv.value.priority === 9 && !('summary' in bv.value), 'the server checks ranges and required: ' + JSON.stringify(bv));
  // any other schema: one field for the whole value
  let one = W8.formModel(null);
  check(one.whole && one.fields.length === 1 && one.fields[0].kind === 'json', 'no schema: a JSON box');
  bv = W8.buildValue(one, { '': ' {"a": [1]} ' });
  check(bv.ok && JSON.stringify(bv.value) === '{"a":[1]}', 'whole JSON: ' + JSON.stringify(bv));
  bv = W8.buildValue(one, { '': '' });
  check(!bv.ok && bv.field === null, 'whole JSON empty: ' + JSON.stringify(bv));
  one = W8.formModel({ type: 'boolean' });
  check(one.whole && one.fields[0].kind === 'boolean' && W8.buildValue(one, { '': true }).value === true, 'a boolean schema: a checkbox');
  one = W8.formModel({ type: 'string', maxLength: 4000 });
  check(one.fields[0].kind === 'text' && W8.buildValue(one, { '': '' }).value === '', 'a long string schema: a textarea, empty allowed');
  one = W8.formModel({ type: 'object' });
  check(one.whole && one.fields[0].kind === 'json', 'an object without properties: a JSON box');
  one = W8.formModel({ enum: ['a', 'b'] });
  check(one.fields[0].kind === 'enum' && W8.buildValue(one, { '': '1' }).value === 'b' && !W8.buildValue(one, { '': '' }).ok, 'an enum schema: a select');

  // exec-state.js: step.waiting and signal.* events
  const ws = new ExecState('w');
  ws.loadTree({ id: 'w', depth: 0, children: [], steps: {
    a: { status: 'pending', attempt: 0, kind: 'wait', signal: 'approval' },
    done: { status: 'completed', attempt: 1, kind: 'wait', signal: 'go', deadline: at(H),
      result: { value: 1, timed_out: false, by: 'user:bob', at: at(0) } } } });
  const wstep = (n) => ws.execs.get('w').steps[n];
  check(wstep('a').waitSignal === 'approval' && wstep('a').signal === null && signalText(wstep('a').signal) === null,
    'a step document\'s wait signal is kept apart: ' + JSON.stringify(wstep('a')));
  check(wstep('done').waitSignal === 'go' && wstep('done').deadline === at(H) && wstep('done').answeredBy === 'user:bob',
    'a settled wait keeps its fields: ' + JSON.stringify(wstep('done')));
  const wev = (seq, type, extra) => Object.assign({ seq, type, execution_id: 'w', step: 'a', time: at(seq * 1000) }, extra);
  ws.dirtySteps.clear();
  ws.push(wev(1, 'step.waiting', { status: 'waiting', data: { attempt: 1, signal: 'approval', deadline: at(24 * H), prompt: 'Publish?' } }));
  check(wstep('a').status === 'waiting' && wstep('a').attempt === 1 && wstep('a').deadline === at(24 * H) && wstep('a').prompt === 'Publish?' &&
    wstep('a').started_at === at(1000) && ws.dirtySteps.has('w\u0000a'), 'step.waiting: ' + JSON.stringify(wstep('a')));
  ws.push(wev(2, 'signal.received', { step: undefined, data: { signal_id: 's1', name: 'approval', by: 'user:alice', step: 'a', fail: false } }));
  check(wstep('a').status === 'waiting' && !ws.unknownExec, 'signal.received changes no status');
  ws.push(wev(3, 'signal.consumed', { data: { signal_id: 's1', name: 'approval', by: 'user:alice' } }));
  check(wstep('a').status === 'waiting' && wstep('a').answeredBy === 'user:alice', 'signal.consumed changes no status: ' + JSON.stringify(wstep('a')));
  ws.push(wev(4, 'step.completed', { status: 'completed' }));
  check(wstep('a').status === 'completed' && wstep('a').waitSignal === 'approval' && wstep('a').answeredBy === 'user:alice', 'then completed');
  ws.push({ seq: 5, type: 'signal.received', execution_id: 'elsewhere', time: at(5000), data: {} });
  check(!ws.unknownExec, 'a signal event of another execution asks for no new tree');

  // ui.js refill: a redraw keeps the nodes it repeats (a link being
  // clicked stays the same element), updates the rest in place, and
  // matches items by their data-id.
  const { refill, h: el } = await import('/ui/ui.js');
  const box = document.createElement('div');
  refill(box, el('a', { href: '#/x' }, 'x'), ' / ', el('span', {}, 'one'));
  const link = box.firstChild, span = box.lastChild;
  refill(box, el('a', { href: '#/x' }, 'x'), ' / ', el('span', { class: 'c' }, 'two'));
  check(box.firstChild === link && box.lastChild === span && span.textContent === 'two' && span.className === 'c' &&
    box.childNodes.length === 3, 'refill keeps the link and updates the span: ' + box.innerHTML);
  refill(box, el('strong', {}, 'x'));
  check(box.childNodes.length === 1 && box.firstChild.localName === 'strong', 'refill replaces another tag, drops the rest: ' + box.innerHTML);
  const list = document.createElement('ul');
  const item = (id, href = '#/' + id) => el('li', { 'data-id': id }, el('a', { href }, id));
  refill(list, item('b'), item('c'));
  const [lb, lc] = list.children;
  refill(list, item('a'), item('b'), item('c'));
  check(list.children.length === 3 && list.children[1] === lb && list.children[2] === lc && list.textContent === 'abc',
    'refill keeps items by data-id when one comes first: ' + list.innerHTML);
  refill(list, item('a'), item('c'));
  check(list.textContent === 'ac' && list.children[1].getAttribute('data-id') === 'c', 'refill drops an item: ' + list.innerHTML);
  const kept = list.children[0];
  refill(list, item('a', '#/a2'));
  check(list.children.length === 1 && list.children[0] === kept && kept.firstChild.getAttribute('href') === '#/a2',
    'refill updates an item in place: ' + list.innerHTML);

  check(fmtDuration(850) === '850ms' && fmtDuration(12345) === '12.3s' && fmtDuration(245000) === '4m 05s' &&
    fmtDuration(7380000) === '2h 03m', 'fmtDuration');
  done(fails);
})().catch((e) => done(['exception: ' + e]));
"""


def test(hx):
    b = hx.browser
    b.login("ta")
    b.one("exec-table")
    fails = b.driver.execute_async_script(SCRIPT)
    assert not fails, "unit checks failed:\n  " + "\n  ".join(fails)


if __name__ == "__main__":
    main(test, "units")
