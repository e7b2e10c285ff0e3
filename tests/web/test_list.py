#!/usr/bin/python3
"""test_list.py: the executions list.

Newest first; counts per status; filters by status and by graph (kept in
the URL's hash); search by a whole id (opens it) or a part of one (filters
the page); pages through the API's `next` cursor (50 per page); the age and
duration columns; a new execution appears without a reload.
"""

from selenium.webdriver.support.ui import Select

from harness import main

QUICK = {"name": "quick", "steps": {"a": {"fn": "noop"}}}
BAD = {"name": "bad", "steps": {"a": {"fn": "fail"}}}
SLOW = {"name": "slow", "steps": {"a": {"fn": "sleep", "with": {"ms": 60000}}}}


def ids(b):
    return [r.get_attribute("data-id") for r in b.q("exec-row")]


def test(hx):
    s, b = hx.server, hx.browser
    for g in (QUICK, BAD, SLOW):
        s.register(g)
    quick = [s.start_execution("quick")["id"] for _ in range(55)]
    for q in quick[-3:]:
        s.wait_status(q, "completed")
    bad = s.start_execution("bad")["id"]
    s.wait_status(bad, "failed")
    slow = s.start_execution("slow")["id"]
    s.wait_status(slow, "running")

    b.login("ta")
    b.wait(lambda: len(b.q("exec-row")) == 50, 10, "a first page of 50")
    assert ids(b)[:3] == [slow, bad, quick[-1]], f"newest first: {ids(b)[:3]}"
    counts = lambda: {e.get_attribute("data-status"): e.text.split()[-1] for e in b.q("status-count")}  # noqa: E731
    b.wait(lambda: counts().get("completed") == "55" and counts().get("failed") == "1" and counts().get("running") == "1", 10,
           f"counts per status ({counts()})")
    cell = lambda testid: b.read(lambda: b.q("exec-row", id=slow)[0].find_element(  # noqa: E731
        "css selector", f'[data-testid="{testid}"]').text)
    assert "ago" in cell("exec-age")
    assert cell("exec-duration").endswith("s"), "a duration"
    assert "step_failed" in b.read(lambda: b.q("exec-row", id=bad)[0].text), "the failed row says why"

    # pagination through `next`
    b.click("page-older")
    b.wait(lambda: len(b.q("exec-row")) == 7 and b.text("page-number") == "page 2", 10, "the second page")
    assert set(ids(b)) == set(quick[:7]), "the 7 oldest on page 2"
    assert b.q("page-older")[0].get_attribute("disabled") is not None, "no third page"
    b.click("page-newer")
    b.wait(lambda: len(b.q("exec-row")) == 50 and b.text("page-number") == "page 1", 10, "back to page 1")

    # status filter (select) and count button
    Select(b.one("filter-status")).select_by_value("failed")
    b.wait(lambda: ids(b) == [bad], 10, "only the failed one")
    assert "status=failed" in b.driver.current_url, b.driver.current_url
    b.click("status-count", status="running")
    b.wait(lambda: ids(b) == [slow], 10, "only the running one (count button)")
    b.click("status-count", status="running")  # toggles off
    b.wait(lambda: len(b.q("exec-row")) == 50, 10, "any status again")

    # graph filter
    g = b.one("filter-graph")
    g.send_keys("slow")
    g.send_keys("\t")
    b.wait(lambda: ids(b) == [slow], 10, "only graph slow")
    assert "graph=slow" in b.driver.current_url
    g.clear()
    g.send_keys("\t")
    b.wait(lambda: len(b.q("exec-row")) == 50, 10, "any graph again")

    # search: part of an id filters the page, a whole id opens it
    part = quick[-2][-6:]
    b.one("filter-id").send_keys(part)
    b.wait(lambda: ids(b) == [quick[-2]], 10, "the row whose id contains the part")
    b.one("filter-id").clear()
    b.one("filter-id").send_keys(bad)
    b.click("filter-id-go")
    b.wait(lambda: b.driver.current_url.endswith(f"#/executions/{bad}"), 10, "the whole id opens its page")
    b.wait(lambda: b.text("exec-status-text") == "failed", 10, "the failed execution's page")

    # live: a new execution appears by itself
    b.go("#/executions")
    b.one("exec-row", id=slow)
    new = s.start_execution("quick")["id"]
    b.wait(lambda: ids(b) and ids(b)[0] == new, 6, "the new execution on top without a reload")


if __name__ == "__main__":
    main(test, "list")
