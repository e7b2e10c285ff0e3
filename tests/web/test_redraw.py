#!/usr/bin/python3
"""test_redraw.py: a link pressed while the page redraws still navigates.

The execution page redraws its header every second and on every event
(the breadcrumbs, the details with the graph's link). A click is a press
and a release: a redraw between the two must not take the link away from
under the pointer. On a child's page, the root link is pressed, held
across two redraws of the header, and released: the root's page opens.
Then the graph's link in the root's details, the same way.
"""

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains

from harness import main, wait_for

INNER = {"name": "held_inner", "steps": {"wait": {"fn": "sleep", "with": {"ms": 60000}}}}
OUTER = {"name": "held_outer", "steps": {"sub": {"graph": "held_inner"}}}


def press_through_redraws(b, link, what):
    """Presses `link`, releases it after the header was drawn twice more;
    returns whether the pressed element was still in the page then."""
    draws = b.js("return window.__canopyStats.headerDraws")
    ActionChains(b.driver).click_and_hold(link).perform()
    b.wait(lambda: b.js("return window.__canopyStats.headerDraws") >= draws + 2, 10,
           f"two redraws of the header while {what} is pressed")
    try:
        still = b.js("return arguments[0].isConnected", link)
    except StaleElementReferenceException:  # replaced: no longer in the page
        still = False
    ActionChains(b.driver).release().perform()
    return still


def test(hx):
    s, b = hx.server, hx.browser
    s.register(INNER)
    s.register(OUTER)
    root = s.start_execution("held_outer")["id"]

    def child_running():
        kids = s.ok("GET", f"/v1/executions/{root}/tree")["children"]
        return kids[0]["id"] if kids and kids[0]["status"] == "running" else None
    child = wait_for(child_running, 30, "the child running")

    b.login("ta")
    b.go(f"#/executions/{child}")
    b.wait(lambda: b.q("step-node", exec=child, step="wait", status="running"), 10, "the child's page")
    link = b.one("root-link")
    assert press_through_redraws(b, link, "the root link"), "the pressed root link was redrawn away"
    b.wait(lambda: b.text("exec-id") == root, 10, "the root's page after the click")

    b.wait(lambda: b.q("step-node", exec=root, step="sub", status="running"), 10, "the root's page drawn")
    graph_link = b.one("exec-graph-link")
    assert press_through_redraws(b, graph_link, "the graph link"), "the pressed graph link was redrawn away"
    b.wait(lambda: b.js("return location.hash") == "#/graphs/held_outer", 10, "the graph's page after the click")
    s.ok("POST", f"/v1/executions/{root}/stop", {"wait": 15})


if __name__ == "__main__":
    main(test, "redraw")
