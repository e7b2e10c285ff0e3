#!/usr/bin/python3
"""test_units.py: the dashboard's pure functions, run inside the browser.

- api.js sseParser: the same stream cut at every possible byte gives the
  same messages (ids, event names, multi-line data, retry, comments, CRLF).
- dag.js layout: layer = longest path from a root, order in a layer by the
  barycenter of the predecessors, a layer over 30 steps wraps.
- ui.js fmtDuration.
- exec-state.js: a step.signalled event shows on its running step as the
  CLI shows it ("SIGINT sent · SIGTERM in 9s", counting down), not for
  another attempt, and goes with the step's next status.
- ui.js confirmDialog: a dialog opened again before the close event of the
  one cancelled just before it is dispatched (a quick Escape, Enter) answers
  for itself: the late close event neither confirms nor cancels it.
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
