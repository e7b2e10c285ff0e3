#!/usr/bin/python3
"""test_conditions.py: conditional steps on the execution page.

A graph branches on an input: `fast` runs, `slow` is skipped (its `when`
is false) and `then` with it (it needs `slow`), `join` runs after either
(`after: any_completed`). The DAG shows the skipped steps with their own
status, icon and reason, for a settled execution loaded from its document,
and for one followed live from its event stream.
"""

from harness import main

BRANCH = {"name": "branch", "inputs": ["mode"], "steps": {
    "pick": {"fn": "echo", "with": {"mode": "${inputs.mode}"}},
    "hold": {"fn": "sleep", "with": {"ms": 1500}, "needs": ["pick"]},
    "fast": {"fn": "noop", "needs": ["hold"], "when": {"equals": ["${steps.pick.mode}", "fast"]}},
    "slow": {"fn": "noop", "needs": ["hold"], "when": {"in": ["${steps.pick.mode}", ["slow", "careful"]]}},
    "then": {"fn": "noop", "needs": ["slow"]},
    "join": {"fn": "noop", "needs": ["fast", "then"], "after": "any_completed"},
}}


def check_page(b, xid):
    for step, status in (("pick", "completed"), ("fast", "completed"), ("slow", "skipped"),
                         ("then", "skipped"), ("join", "completed")):
        b.wait(lambda: b.q("step-node", exec=xid, step=step, status=status), 15,
               f"step {step} {status} in the DAG")
    for step, reason in (("slow", "condition_false"), ("then", "needs_skipped")):
        label = b.read(lambda: b.q("step-node", exec=xid, step=step)[0].get_attribute("aria-label"))
        assert label == f"step {step}: skipped \u00b7 {reason}", f"the label of {step}: {label!r}"
        cls = b.read(lambda: b.q("step-node", exec=xid, step=step)[0].get_attribute("class"))
        assert "st-skipped" in cls.split(), f"the class of {step}: {cls!r}"
        icon = b.read(lambda: b.q("step-node", exec=xid, step=step)[0]
                      .find_element("css selector", ".icon").text)
        assert icon == "\u21B7", f"the icon of {step}: {icon!r}"


def test(hx):
    s, b = hx.server, hx.browser
    s.register(BRANCH)
    b.login("ta")

    # Live: the page is open while the execution decides its branches.
    live = s.start_execution("branch", {"mode": "fast"})["id"]
    b.go(f"#/executions/{live}")
    b.wait(lambda: b.q("step-node", exec=live, step="hold", status="running"), 15, "hold running")
    s.wait_status(live, "completed")
    check_page(b, live)
    b.js("document.querySelector('[data-testid=step-node]').scrollIntoView({block: 'center'})")
    b.shot("conditions-1-live")

    # Settled: the same from the stored document.
    done = s.start_execution("branch", {"mode": "fast"})["id"]
    s.wait_status(done, "completed")
    b.go(f"#/executions/{done}")
    check_page(b, done)
    x = s.execution(done)
    assert x["steps"]["slow"]["status"] == "skipped" and x["steps"]["slow"]["attempt"] == 0, x["steps"]["slow"]


if __name__ == "__main__":
    main(test, "conditions")
