#!/usr/bin/python3
"""test_waits.py: wait steps in the dashboard: the Waiting count, the inbox and a waiting step's page.

Two executions of examples/approval/approval.json (options Approve/Reject)
and one of a triage graph whose wait has no options (a form from its
schema: a boolean, a long string, an enum, an integer). The navigation
counts the open waits; a triage execution opened while it runs turns
`waiting` live with its signal and countdown, and its step panel links to
the inbox. In the inbox: prompts and countdowns; Approve completes the
execution down the approved branch; the form sent with a priority over its
maximum shows the server's 400 with the JSON path and keeps every typed
value, then sent right is taken; "Fail…" from the keyboard fails the last
wait (`rejected`). The count goes down with each answer.
"""

import json
import re

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from harness import REPO, main, wait_for

APPROVAL = json.loads((REPO / "examples" / "approval" / "approval.json").read_text())

TRIAGE = {"name": "triage", "inputs": ["ticket"], "steps": {
    "intake": {"fn": "echo", "with": {"ticket": "${inputs.ticket}"}},
    "hold": {"fn": "sleep", "with": {"ms": 1500}, "needs": ["intake"]},
    "triage": {"needs": ["hold"], "wait": {
        "signal": "triage",
        "prompt": "Triage ticket ${steps.intake.ticket}",
        "schema": {"type": "object", "required": ["urgent", "summary", "team"], "additionalProperties": False,
                   "properties": {"urgent": {"type": "boolean"},
                                  "summary": {"type": "string", "minLength": 5, "maxLength": 500},
                                  "team": {"enum": ["infra", "web", "data"]},
                                  "priority": {"type": "integer", "minimum": 1, "maximum": 5}}},
        "timeout": "2h"}},
    "route": {"fn": "echo", "needs": ["triage"], "with": {"team": "${steps.triage.value.team}"}},
}}


def test(hx):
    s, b = hx.server, hx.browser
    s.register(APPROVAL)
    s.register(TRIAGE)
    # The second starts once the first's wait is armed: the inbox's order
    # (oldest armed first) is then known.
    first = s.start_execution("approval_flow", {"topic": "Q3"})["id"]
    wait_for(lambda: len(s.ok("GET", "/v1/waits")["items"]) == 1, 20, "the first approval armed")
    second = s.start_execution("approval_flow", {"topic": "Q4"})["id"]
    wait_for(lambda: len(s.ok("GET", "/v1/waits")["items"]) == 2, 20, "two approvals armed")
    keys = lambda *k: ActionChains(b.driver).send_keys(*k).perform()  # noqa: E731
    count = lambda: b.js("return document.querySelector('[data-testid=waits-count]').dataset.count")  # noqa: E731

    def card(xid):
        return b.one("wait-card", exec=xid)

    def in_card(xid, testid, **data):
        sel = f'[data-testid="{testid}"]' + "".join(f'[data-{k}="{v}"]' for k, v in data.items())
        return card(xid).find_element(By.CSS_SELECTOR, sel)

    def answer(xid):
        return b.js("const a = document.querySelector(`[data-testid=wait-card][data-exec='${arguments[0]}'] [data-testid=wait-answer]`);"
                    "return a && !a.hidden ? {result: a.dataset.result || '', path: a.dataset.path || '', text: a.innerText} : null", xid)

    # The count in the navigation, from GET /v1/waits when the page loads.
    b.login("ta")
    b.wait(lambda: count() == "2", 10, "the Waiting count 2")
    assert b.one("waits-count").text == "2"

    # A triage execution followed live: its wait arms while the page is open.
    tri = s.start_execution("triage", {"ticket": "T-42"})["id"]
    b.go(f"#/executions/{tri}")
    b.wait(lambda: b.q("step-node", exec=tri, step="hold", status="running"), 15, "hold running")
    b.wait(lambda: b.q("step-node", exec=tri, step="triage", status="waiting"), 15, "triage waiting, live")
    label = b.read(lambda: b.q("step-node", exec=tri, step="triage")[0].get_attribute("aria-label"))
    assert re.fullmatch(r"step triage: waiting \u00b7 triage \u00b7 1h59m left", label), f"the waiting node's label: {label!r}"
    cls = b.read(lambda: b.q("step-node", exec=tri, step="triage")[0].get_attribute("class"))
    assert "st-waiting" in cls.split(), f"the waiting node's class: {cls!r}"
    icon = b.read(lambda: b.q("step-node", exec=tri, step="triage")[0].find_element(By.CSS_SELECTOR, ".icon").text)
    assert icon == "\u2016", f"the waiting icon: {icon!r}"
    b.wait(lambda: count() == "3", 10, "the count 3 after step.waiting (not the 15 s poll)")
    b.click("step-node", exec=tri, step="triage")
    b.wait(lambda: b.text("step-prompt") == "Triage ticket T-42", 5, "the prompt in the step panel")
    assert b.text("step-wait-signal") == "triage"
    assert re.fullmatch(r"1h59m left", b.text("step-deadline")), b.text("step-deadline")
    b.shot("waits-1-execution-waiting")
    b.click("step-answer-link")

    # The inbox, opened at the triage card.
    b.wait(lambda: len(b.q("wait-card")) == 3, 10, "three cards in the inbox")
    b.wait(lambda: "target" in card(tri).get_attribute("class").split(), 5, "the linked card marked")
    assert b.js("return document.activeElement.closest('[data-testid=wait-card]').dataset.exec") == tri, "the linked card has the focus"
    order = [c.get_attribute("data-exec") for c in b.q("wait-card")]
    assert order == [first, second, tri], f"oldest armed first: {order}"
    assert in_card(first, "wait-prompt").text == 'Publish "Q3: a first draft"?'
    assert in_card(second, "wait-prompt").text == 'Publish "Q4: a first draft"?'
    assert in_card(tri, "wait-path").text == "triage"
    assert in_card(first, "wait-exec-link").get_attribute("href").endswith(f"#/executions/{first}")
    for xid, want in ((first, r"23h5\dm left"), (tri, r"1h59m left")):
        text = in_card(xid, "wait-countdown").text
        assert re.fullmatch(want, text), f"the countdown of {xid}: {text!r}"
    assert [e.get_attribute("data-label") for e in card(first).find_elements(By.CSS_SELECTOR, "[data-testid=wait-option]")] == ["Approve", "Reject"]
    assert not card(first).find_elements(By.CSS_SELECTOR, "[data-testid=wait-form]"), "options: buttons, no form"
    b.shot("waits-2-inbox")

    # Approve: taken by the step; the execution goes down the approved branch.
    in_card(first, "wait-option", label="Approve").click()
    b.wait(lambda: (answer(first) or {}).get("result") == "consumed", 10, "the approval taken")
    assert "taken by step approve" in answer(first)["text"], answer(first)
    assert card(first).get_attribute("data-state") == "consumed"
    assert not in_card(first, "wait-option", label="Reject").is_enabled(), "an answered card takes no second answer"
    b.wait(lambda: count() == "2", 10, "the count 2 after the approval")
    x = s.wait_status(first, "completed")
    assert x["steps"]["publish"]["status"] == "completed" and x["steps"]["revise"]["status"] == "skipped", x["steps"]
    assert x["steps"]["approve"]["result"]["value"] == {"approved": True}, x["steps"]["approve"]["result"]

    # The generated form: a field per property, of the property's kind.
    kinds = {e.get_attribute("data-field"): e.get_attribute("data-kind")
             for e in card(tri).find_elements(By.CSS_SELECTOR, "[data-testid=wait-field]")}
    assert kinds == {"urgent": "boolean", "summary": "text", "team": "enum", "priority": "integer"}, kinds
    field = lambda name: in_card(tri, "wait-field", field=name)  # noqa: E731
    assert field("summary").tag_name == "textarea" and field("team").tag_name == "select"
    assert field("urgent").get_attribute("type") == "checkbox" and field("priority").get_attribute("type") == "number"
    required = {e.get_attribute("data-field") for e in card(tri).find_elements(By.CSS_SELECTOR, "[data-testid=wait-field][aria-required=true]")}
    assert required == {"urgent", "summary", "team"}, required
    field("urgent").click()
    field("summary").send_keys("disk full on db-3")
    Select(field("team")).select_by_visible_text("data")
    field("priority").send_keys("9")
    field("priority").send_keys(Keys.ENTER)  # Enter in a field sends the form
    b.wait(lambda: (answer(tri) or {}).get("result") == "error", 10, "the server's 400")
    a = answer(tri)
    assert a["path"] == "/value/priority", a
    assert "400 invalid_value" in a["text"] and "9 is over maximum 5" in a["text"] and "/value/priority" in a["text"], a
    assert field("urgent").is_selected() and field("summary").get_attribute("value") == "disk full on db-3", "typed values kept"
    assert Select(field("team")).first_selected_option.text == "data" and field("priority").get_attribute("value") == "9"
    assert field("priority").get_attribute("aria-invalid") == "true", "the field the server named is marked"
    assert b.js("return document.activeElement.dataset.field") == "priority", "and focused"
    assert s.execution(tri)["steps"]["triage"]["status"] == "waiting", "a refused value leaves the wait armed"
    assert count() == "2"
    b.js("arguments[0].scrollIntoView({block: 'end'})", in_card(tri, "wait-answer"))
    b.shot("waits-3-form-error")
    field("priority").clear()
    field("priority").send_keys("2")
    in_card(tri, "wait-submit").click()
    b.wait(lambda: (answer(tri) or {}).get("result") == "consumed", 10, "the form taken")
    assert "taken by step triage" in answer(tri)["text"], answer(tri)
    b.wait(lambda: count() == "1", 10, "the count 1 after the form")
    x = s.wait_status(tri, "completed")
    assert x["steps"]["triage"]["result"]["value"] == {"urgent": True, "summary": "disk full on db-3", "team": "data", "priority": 2}, x["steps"]["triage"]
    assert x["steps"]["route"]["result"] == {"team": "data"}, x["steps"]["route"]

    # The last approval's own page: its step waiting, as `canopy show` says it.
    b.go(f"#/executions/{second}")
    b.wait(lambda: b.q("step-node", exec=second, step="approve", status="waiting"), 10, "approve waiting")
    label = b.read(lambda: b.q("step-node", exec=second, step="approve")[0].get_attribute("aria-label"))
    assert re.fullmatch(r"step approve: waiting \u00b7 approval \u00b7 23h5\dm left", label), label
    stat = b.read(lambda: b.q("step-node", exec=second, step="approve")[0].find_element(By.CSS_SELECTOR, ".stat").text)
    assert re.fullmatch(r"waiting \u00b7 approval \u00b7 23h5\dm", stat), f"the node's visible text (its label says left): {stat!r}"
    b.wait(lambda: b.q("step-node", exec=second, step="publish", status="pending"), 5, "publish pending")

    # Fail… from the keyboard: the dialog asks for a message.
    b.click("nav-waits")
    b.wait(lambda: len(b.q("wait-card")) == 1, 10, "only the open wait listed")
    b.js("arguments[0].focus()", in_card(second, "wait-fail"))
    keys(Keys.ENTER)
    b.one("confirm-dialog")
    assert b.js("return document.activeElement.dataset.testid") == "wait-fail-message", "the dialog focuses its message"
    keys("not this quarter")
    keys(Keys.TAB, Keys.TAB)
    assert b.js("return document.activeElement.dataset.testid") == "confirm-yes"
    keys(Keys.ENTER)
    b.wait(lambda: (answer(second) or {}).get("result") == "consumed", 10, "the failure taken")
    b.wait(lambda: count() == "0", 10, "the count 0")
    assert not b.one("nav-waits").find_element(By.CSS_SELECTOR, "[data-testid=waits-count]").is_displayed(), "no count shown at 0"
    x = s.wait_status(second, "failed")
    assert x["steps"]["approve"]["status"] == "failed" and x["steps"]["approve"]["reason"] == "rejected", x["steps"]["approve"]
    assert "not this quarter" in (x["steps"]["approve"]["error"] or ""), x["steps"]["approve"]

    # Opened again, the inbox is empty; the approved execution's DAG.
    b.go("#/executions")
    b.go("#/waits")
    b.one("waits-empty")
    b.go(f"#/executions/{first}")
    for step, status in (("approve", "completed"), ("publish", "completed"), ("revise", "skipped"), ("notify", "completed")):
        b.wait(lambda: b.q("step-node", exec=first, step=step, status=status), 10, f"{step} {status} in the DAG")
    b.click("step-node", exec=first, step="approve")
    b.wait(lambda: b.text("step-answered-by") == "user:alice", 5, "who answered, in the step panel")
    assert b.text("step-wait-signal") == "approval" and not b.q("step-answer-link"), "a settled wait has no answer link"


if __name__ == "__main__":
    main(test, "waits")
