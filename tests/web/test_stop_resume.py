#!/usr/bin/python3
"""test_stop_resume.py: stop and resume from the dashboard.

Serve with two users; sign in as alice; register and start a graph whose
`hold` step runs until the test lets it go. The execution appears in the
list on its own (polling), its steps turn running live (SSE). Stop from the
page (dialog, confirm): the outcome says stopped / requested and lists
`hold` back to pending, and the DAG shows it pending. `hold` ignores
SIGINT: while the stop escalates, its step panel and its DAG node say
"SIGINT sent · SIGTERM in Ns" (the `step.signalled` event), as the CLI does,
counting down in place (the panel's fields are kept, not redrawn anew). Resume from the page:
the execution completes, and the side-effect log proves that the steps
completed before the stop did not run again (one line per step).
"""

from selenium.common.exceptions import StaleElementReferenceException

from harness import main


def graph(tmp):
    log, go = tmp / "side-effects.log", tmp / "go"

    def step(name, needs=()):
        return {"run": ["sh", "-c", 'echo "$N" >> "$LOG"'], "env": {"N": name, "LOG": str(log)}, "needs": list(needs)}

    hold = {"run": ["sh", "-c", 'trap "" INT; while [ ! -e "$GO" ]; do sleep 0.05; done; echo hold >> "$LOG"'],
            "env": {"GO": str(go), "LOG": str(log)}, "needs": ["prepare"], "grace": {"interrupt": "4s", "terminate": "2s"}}
    return log, go, {"name": "work", "steps": {
        "fetch": step("fetch"),
        "prepare": step("prepare", ["fetch"]),
        "hold": hold,
        "side": step("side", ["fetch"]),
        "finish": step("finish", ["hold", "side"]),
    }}


def test(hx):
    s, b = hx.server, hx.browser
    log, go, g = graph(hx.tmp)
    s.register(g)

    b.login("ta")
    b.one("exec-table")
    assert not b.q("exec-row"), "alice has no execution yet"

    x = s.start_execution("work")
    xid = x["id"]
    row = b.one("exec-row", timeout=8, id=xid)  # appears by itself
    b.wait(lambda: "running" in b.q("exec-row", id=xid)[0].text, 8, "the row to say running")
    row.find_element("css selector", '[data-testid="exec-link"]').click()

    b.one("dag-section", exec=xid)
    b.wait(lambda: b.q("step-node", step="hold", status="running"), 10, "hold to turn running live")
    b.wait(lambda: b.q("step-node", step="side", status="completed"), 10, "side completed")
    assert b.q("step-node", step="finish", status="pending"), "finish waits for hold"
    # colour is never the only signal: the node says its status in words
    assert "running" in b.read(lambda: b.q("step-node", step="hold")[0].text), "the node has a status word"

    b.click("step-node", step="hold")
    b.wait(lambda: b.text("step-panel-name") == "hold", 10, "the step panel of hold")
    assert b.text("step-signal") == "", "no signal before the stop"

    b.click("stop-button")
    b.one("confirm-dialog")
    assert b.js("return document.activeElement.dataset.testid") == "confirm-no", "the dialog takes the focus (Cancel first)"
    b.confirm()
    # hold ignores SIGINT: SIGTERM follows after its 4 s grace
    b.wait(lambda: b.text("step-signal").startswith("SIGINT sent \u00b7 SIGTERM in ")
           and "SIGINT sent" in b.q("step-node", step="hold")[0].text, 10,
           f"the panel and the node to show the signal sent ({b.text('step-signal')!r})")
    # The countdown redraws the panel each second, in place: the element
    # shown before a tick is the one that shows the next second.
    shown = b.one("step-signal")
    first = b.text("step-signal")
    b.wait(lambda: b.text("step-signal") != first, 10, f"the countdown to tick ({first!r})")
    try:
        kept = b.js("return arguments[0].isConnected", shown)
    except StaleElementReferenceException:  # replaced: no longer in the page
        kept = False
    assert kept, "the countdown replaced the panel's fields"
    b.wait(lambda: (lambda o: o if o and "stopped" in o.text and b.q("outcome-pending") else None)(
        (b.q("outcome") or [None])[0]), 20, "the stop's outcome")
    text = b.text("outcome")
    assert "requested" in text, f"the outcome names the reason: {text!r}"
    pend = b.read(lambda: [e.get_attribute("data-step") for e in b.q("outcome-pending")])
    assert pend == ["hold"], f"only hold went back to pending, the outcome says {pend}"
    b.wait(lambda: b.text("exec-status-text") == "stopped", 10, "the page to show stopped")
    b.wait(lambda: b.text("exec-reason") == "requested", 10, f"the reason shown ({b.text('exec-reason')!r})")
    b.wait(lambda: b.q("step-node", step="hold", status="pending"), 10, "hold pending in the DAG")
    b.wait(lambda: "requested" in b.q("step-node", step="hold")[0].text, 10, "the pending step saying why")
    doc = s.execution(xid)
    assert doc["status"] == "stopped" and doc["steps"]["hold"]["status"] == "pending", doc
    b.shot("stop-resume-1-stopped")

    before = log.read_text().split()
    assert sorted(before) == ["fetch", "prepare", "side"], f"side effects before the resume: {before}"

    b.click("resume-button")
    b.confirm()
    b.wait(lambda: "Resumed" in b.text("outcome"), 15, "the resume's outcome")
    b.wait(lambda: b.q("step-node", step="hold", status="running"), 10, "hold running again")
    go.write_text("go")
    b.wait(lambda: b.text("exec-status-text") == "completed", 20, "the execution to complete on the page")
    b.wait(lambda: b.q("step-node", step="finish", status="completed"), 10, "finish completed in the DAG")
    assert s.execution(xid)["status"] == "completed"
    lines = log.read_text().split()
    assert sorted(lines) == ["fetch", "finish", "hold", "prepare", "side"], \
        f"each step ran exactly once (completed steps not re-run): {lines}"
    # the event log on the page shows each event once
    seqs = [int(e.get_attribute("data-seq")) for e in b.q("event-row")]
    assert len(seqs) == len(set(seqs)) and seqs == sorted(seqs), "the page's event log has no repeats"
    b.shot("stop-resume-2-completed")

    # back to the list: the row is completed, without a reload
    b.go("#/executions")
    b.wait(lambda: b.q("exec-row", id=xid) and "completed" in b.q("exec-row", id=xid)[0].text, 10, "the list row completed")


if __name__ == "__main__":
    main(test, "stop_resume")
