#!/usr/bin/python3
"""test_reconnect.py: the SSE stream is cut.

The browser talks to the server through a TCP relay. While an execution
prints a line every 100 ms (step.output events):
1. the relay drops every connection: the page shows it is reconnecting,
   reconnects with Last-Event-ID and catches up on what it missed;
2. the server is stopped (SIGTERM: the tree is stopped with reason
   `shutdown` after the streams closed) and started again on the same home
   and port: the page reconnects, gets the shutdown's events and the
   stream's end; Resume from the page runs the rest to completion.
At the end the page's event log must be exactly the API's log: every event
once, in order, none missing.
"""

from harness import main

TICKS = 40


def graph(tmp):
    go = tmp / "go"
    return go, {"name": "ticker", "steps": {
        "emit": {"run": ["sh", "-c", f'i=0; while [ $i -lt {TICKS} ]; do echo "tick $i"; i=$((i+1)); sleep 0.1; done']},
        "hold": {"run": ["sh", "-c", 'while [ ! -e "$GO" ]; do sleep 0.05; done; echo released'], "env": {"GO": str(go)}},
        "after": {"fn": "echo", "with": {"done": True}, "needs": ["emit", "hold"]},
    }}


def page_seqs(b):
    return [int(e.get_attribute("data-seq")) for e in b.q("event-row")]


def test(hx):
    s, b, relay = hx.server, hx.browser, hx.relay
    go, g = graph(hx.tmp)
    s.register(g)
    xid = s.start_execution("ticker")["id"]

    b.login("ta")
    b.go(f"#/executions/{xid}")
    b.wait(lambda: b.q("stream-state", state="live"), 10, "the stream live")
    b.wait(lambda: len(b.q("event-row", type="step.output")) >= 5, 10, "a few output events")

    # 1. the network drops every connection
    cut = relay.cut()
    assert cut >= 1, "the stream had a connection to cut"
    b.wait(lambda: b.q("stream-state", state="reconnecting"), 5, "the page to show it is reconnecting")
    b.shot("reconnect-1-cut")
    b.wait(lambda: b.q("stream-state", state="live"), 10, "the page to reconnect")
    b.wait(lambda: b.q("step-node", step="emit", status="completed"), 15, "emit completed (after the cut)")
    outputs = b.read(lambda: [t for t in (e.text for e in b.q("event-row", type="step.output")) if "tick" in t])
    assert len(outputs) == TICKS, f"every output line once across the cut: {len(outputs)} of {TICKS}"

    # 2. the server restarts on the same home and port
    s.stop()
    b.wait(lambda: b.q("stream-state", state="reconnecting"), 10, "reconnecting while the server is down")
    s.start()
    b.wait(lambda: b.q("stream-state", state="ended"), 20, "the shutdown's events and the stream's end")
    b.wait(lambda: b.text("exec-status-text") == "stopped" and b.text("exec-reason") == "shutdown", 10, "stopped / shutdown")
    b.shot("reconnect-2-restarted")

    b.click("resume-button")
    b.confirm()
    b.wait(lambda: b.q("step-node", step="hold", status="running"), 15, "hold running after the resume")
    go.write_text("go")
    b.wait(lambda: b.text("exec-status-text") == "completed", 20, "completed on the page")
    b.wait(lambda: b.q("stream-state", state="ended"), 10, "the stream's end")

    api = [e["seq"] for e in s.events(xid)]
    b.wait(lambda: page_seqs(b) == api, 10, "the page's log to equal the API's")
    seqs = page_seqs(b)
    assert len(seqs) == len(set(seqs)), "an event shown twice"
    stats = b.js("return window.__canopyStats")
    assert stats["received"] == len(api), f"events applied {stats['received']} != {len(api)} in the log"
    ticks = b.read(lambda: [t for t in (e.text for e in b.q("event-row", type="step.output")) if "tick" in t])
    assert len(ticks) == TICKS, f"{len(ticks)} tick lines in the page's log, expected {TICKS}"
    print(f"  {len(api)} events, each once; {cut} connection(s) cut, one restart")


if __name__ == "__main__":
    main(test, "reconnect", relay=True)
