#!/usr/bin/python3
"""test_keyboard.py: the dashboard without a mouse.

Sign in with the keyboard; Tab reaches the navigation, the DAG (one tab
stop, arrow keys between steps, Enter opens the step panel) and the Stop
button; focus is visible; the confirmation dialog opens on Cancel, Escape
closes it without stopping, and Tab + Enter on its confirm button stops.
"""

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from harness import main

G = {"name": "kb", "steps": {
    "one": {"fn": "echo", "with": {"a": 1}},
    "two": {"fn": "sleep", "with": {"ms": 60000}, "needs": ["one"]},
    "three": {"fn": "noop", "needs": ["two"]},
}}


def test(hx):
    s, b = hx.server, hx.browser
    s.register(G)
    xid = s.start_execution("kb")["id"]
    keys = lambda *k: ActionChains(b.driver).send_keys(*k).perform()  # noqa: E731
    active = lambda: b.js("const a = document.activeElement; return a && (a.dataset.testid || a.tagName) + ':' + (a.dataset.step || '')")  # noqa: E731

    b.open("")
    b.one("token-input")
    assert active() == "token-input:", f"the prompt focuses its input: {active()}"
    keys("ta", Keys.ENTER)
    b.one("exec-row", id=xid)

    b.go(f"#/executions/{xid}")
    b.wait(lambda: b.q("step-node", step="two", status="running"), 10, "the DAG")
    b.js("document.querySelector('[data-testid=stop-button]').focus()")
    for _ in range(12):
        keys(Keys.TAB)
        if active().startswith("step-node:"):
            break
    assert active() == "step-node:one", f"Tab reaches the DAG at its first step: {active()}"
    outline = b.js("return getComputedStyle(document.activeElement.querySelector('rect')).strokeWidth")
    assert float(outline.replace("px", "")) >= 3, f"the focused step is outlined (stroke {outline})"
    keys(Keys.ARROW_RIGHT)
    assert active() == "step-node:two", f"ArrowRight moves to the next step: {active()}"
    keys(Keys.ENTER)
    b.wait(lambda: b.text("step-panel-name") == "two", 5, "Enter opens the step panel")
    keys(Keys.TAB)
    assert not active().startswith("step-node"), f"one tab stop per DAG: Tab leaves it ({active()})"

    b.js("document.querySelector('[data-testid=stop-button]').focus()")
    keys(Keys.ENTER)
    b.one("confirm-dialog")
    assert active() == "confirm-no:", f"the dialog focuses Cancel: {active()}"
    keys(Keys.ESCAPE)
    b.wait(lambda: not b.js("return document.querySelector('[data-testid=confirm-dialog]').open"), 5, "Escape closes the dialog")
    assert s.execution(xid)["status"] == "running", "Escape did not stop anything"
    b.js("document.querySelector('[data-testid=stop-button]').focus()")
    keys(Keys.ENTER)
    b.one("confirm-dialog")
    keys(Keys.TAB)
    assert active() == "confirm-yes:", f"Tab moves to the confirm button: {active()}"
    ring = b.js("return getComputedStyle(document.activeElement).outlineStyle")
    assert ring != "none", "the focused button shows a focus ring"
    keys(Keys.ENTER)
    b.wait(lambda: b.text("exec-status-text") == "stopped", 20, "stopped from the keyboard")
    assert s.execution(xid)["reason"] == "requested"


if __name__ == "__main__":
    main(test, "keyboard")
