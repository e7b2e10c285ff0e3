#!/usr/bin/python3
"""test_nested.py: nested graphs.

A graph whose step `sub` runs a registered child graph (and whose step
`inline` runs an inline one). The page draws the child tree and a DAG per
execution (the child's own `needs`). A stop on the root stops the children:
the page shows them stopped with reason `parent_stopped`. Then a stop on a
child's own page stops that child only (`requested`), and its root ends
`stopped` / `child_stopped`. Last, a graph's page stops every unfinished
execution of the graph (POST /v1/graphs/{id}/stop).
"""

from harness import main, wait_for

INNER = {"name": "inner", "steps": {
    "warm": {"fn": "echo", "with": {"ok": 1}},
    "wait": {"fn": "sleep", "with": {"ms": 60000}, "needs": ["warm"]},
    "cool": {"fn": "noop", "needs": ["wait"]},
}}
OUTER = {"name": "outer", "steps": {
    "pre": {"fn": "echo", "with": {"v": 1}},
    "sub": {"graph": "inner", "needs": ["pre"]},
    "inline": {"graph": {"steps": {"i1": {"fn": "sleep", "with": {"ms": 60000}}, "i2": {"fn": "noop", "needs": ["i1"]}}}, "needs": ["pre"]},
    "post": {"fn": "noop", "needs": ["sub", "inline"]},
}}


def children(s, xid):
    return {c["parent_step"]: c for c in s.ok("GET", f"/v1/executions/{xid}/tree")["children"]}


def running_tree(s):
    xid = s.start_execution("outer")["id"]
    seen = {}

    def both_running():
        seen.clear()
        seen.update(children(s, xid))
        return dict(seen) if len(seen) == 2 and all(c["status"] == "running" for c in seen.values()) else None
    try:
        kids = wait_for(both_running, 30, "both children running")
    except Exception:
        tree = s.ok("GET", f"/v1/executions/{xid}/tree")
        raise AssertionError(f"children of {xid} not both running: "
                             f"{ {k: c['status'] for k, c in seen.items()} }; root {tree['status']}, steps "
                             f"{ {k: v['status'] for k, v in tree.get('steps', {}).items()} }") from None
    return xid, kids


def test(hx):
    s, b = hx.server, hx.browser
    s.register(INNER)
    s.register(OUTER)
    xid, kids = running_tree(s)
    sub, inl = kids["sub"]["id"], kids["inline"]["id"]

    b.login("ta")
    b.go(f"#/executions/{xid}")
    tree = b.one("child-tree")
    b.wait(lambda: len(b.q("child-node", within=tree)) == 3, 10, "the tree of three executions")
    b.one("child-node", id=sub)
    # the child's DAG with its own edges (wait needs warm: a later column)
    b.wait(lambda: b.q("step-node", exec=sub, step="wait", status="running"), 10, "the child's step running")
    b.wait(lambda: b.q("step-node", exec=inl, step="i1", status="running"), 10, "the inline child's step running")
    xw = b.js("return Object.fromEntries([...document.querySelectorAll('[data-exec=\"%s\"][data-testid=step-node]')]"
              ".map(g => [g.dataset.step, g.transform.baseVal[0].matrix.e]))" % sub)
    assert xw["warm"] < xw["wait"] < xw["cool"], f"the child's steps are layered left to right by needs: x = {xw}"
    assert b.read(lambda: not b.q("dag-section", exec=sub)[0].find_elements("css selector", ".muted.small") or
                  "unknown" not in b.q("dag-section", exec=sub)[0].text), "the child's graph document was found"
    b.shot("nested-1-running")

    b.click("stop-button")
    b.confirm()
    b.wait(lambda: "stopped" in b.text("outcome-result") and b.q("outcome-pending"), 20, "the stop's outcome")
    pend = sorted((e.get_attribute("data-exec"), e.get_attribute("data-step")) for e in b.q("outcome-pending"))
    want = sorted([(xid, "sub"), (xid, "inline"), (sub, "wait"), (inl, "i1")])
    assert pend == want, f"steps back to pending: {pend}, expected {want}"
    for cid in (sub, inl):
        b.wait(lambda: b.q("child-node", id=cid, status="stopped"), 10, f"child {cid} stopped in the tree")
        reason = b.read(lambda: b.q("child-node", id=cid)[0].find_element(
            "css selector", '[data-testid="child-reason"]').text)
        assert "parent_stopped" in reason, reason
    assert b.text("exec-reason") == "requested"
    assert s.execution(sub)["reason"] == "parent_stopped"
    b.wait(lambda: b.q("step-node", exec=sub, step="wait", status="pending"), 10, "the child's step pending")
    b.shot("nested-2-stopped")

    # a stop on a child's own page
    xid2, kids2 = running_tree(s)
    sub2 = kids2["sub"]["id"]
    b.go(f"#/executions/{sub2}")
    b.wait(lambda: b.q("step-node", exec=sub2, step="wait", status="running"), 10, "the child page")
    assert b.q("root-link"), "the child's page links its root"
    b.click("stop-button")
    b.confirm()
    b.wait(lambda: b.text("exec-status-text") == "stopped" and b.text("exec-reason") == "requested", 20, "the child stopped")
    assert [e.get_attribute("data-step") for e in b.q("outcome-pending")] == ["wait"]
    root = s.ok("POST", f"/v1/executions/{kids2['inline']['id']}/stop", {"wait": 15})  # let the root settle
    assert root["status"] == "stopped"
    doc = s.wait_status(xid2, "stopped")
    assert doc["reason"] == "child_stopped", doc
    # The tree settled: the child's page ends its stream and redraws once
    # more; the link is clicked after that, not into the redraw.
    b.wait(lambda: b.q("stream-state", state="ended"), 10, "the child's stream ended")
    b.click("root-link")
    b.wait(lambda: b.text("exec-reason") == "child_stopped", 10, "the root's reason child_stopped")

    # a graph's page: stop every unfinished execution of it
    a, _ = running_tree(s)
    c, _ = running_tree(s)
    b.go("#/graphs/outer")
    b.one("step-node", step="post")
    b.click("graph-stop-button")
    b.confirm()
    b.wait(lambda: len(b.q("graph-stopped-id")) == 2, 20, "the graph stop's outcome")
    ids = b.read(lambda: sorted(e.find_element("css selector", "a").text for e in b.q("graph-stopped-id")))
    assert ids == sorted([a, c]), f"stopped {ids}, expected {sorted([a, c])}"
    for i in (a, c):
        s.wait_status(i, "stopped")
    b.wait(lambda: all("stopped" in r.text for r in b.q("exec-row")), 10, "the graph's executions all stopped in its list")


if __name__ == "__main__":
    main(test, "nested")
