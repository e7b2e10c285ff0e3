#!/usr/bin/python3
"""test_screenshots.py: a screenshot of each main view, saved under --out.

token prompt, executions list, an execution with its DAG and child tree, the
step panel, the agents list and an agent's conversation, the nodes of a
cluster (one worker up, one lost), the graph view, the inbox of waits, and
phone-width (390 px) views of the list, an execution and the inbox. Each view is checked to be drawn
before its screenshot is taken.
"""

import json

from harness import REPO, main, wait_for

UNIT = {"name": "unit-tests", "steps": {
    "compile": {"run": ["sh", "-c", "echo compiling; sleep 0.2; echo done"]},
    "test": {"fn": "sleep", "with": {"ms": 60000}, "needs": ["compile"]},
}}

PIPELINE = {"name": "pipeline", "limits": {"max_steps": 50, "budget": 20, "deadline": "30m"}, "steps": {
    "fetch": {"run": ["sh", "-c", "for i in 1 2 3; do echo fetched part $i; done"], "cost": 1},
    "parse": {"fn": "echo", "with": {"rows": 42}, "needs": ["fetch"], "cost": 1},
    "lint": {"run": ["sh", "-c", "echo 'lint: 0 warnings'; echo 'note: style' >&2"], "needs": ["fetch"]},
    "build": {"graph": "unit-tests", "needs": ["parse", "lint"]},
    "package": {"fn": "sleep", "with": {"ms": 60000}, "needs": ["parse"]},
    "report": {"fn": "echo", "with": {"ok": True}, "needs": ["build", "package"]},
}}

QUICK = {"name": "quick", "steps": {"a": {"fn": "echo", "with": {"x": 1}}, "b": {"fn": "noop", "needs": ["a"]}}}
BROKEN = {"name": "broken", "steps": {"a": {"fn": "echo"}, "b": {"fn": "fail", "needs": ["a"]}, "c": {"fn": "noop", "needs": ["b"]}}}

APPROVAL = json.loads((REPO / "examples" / "approval" / "approval.json").read_text())

REVIEW = {"name": "review", "steps": {"review": {"wait": {
    "signal": "review", "prompt": "Review the release notes of 2.4", "timeout": "8h",
    "schema": {"type": "object", "required": ["ok", "area"], "properties": {
        "ok": {"type": "boolean", "title": "Looks good"},
        "area": {"enum": ["api", "cli", "dashboard"]},
        "comment": {"type": "string", "maxLength": 2000, "description": "What to change"}}}}}}}

AGENT = {"name": "helper", "on_busy": "queue", "graph": {
    "name": "helper", "inputs": ["message", "history"],
    "steps": {"answer": {"run": ["sh", "-c", "echo \"Here is what I found about: $M\"", "x"], "env": {"M": "${inputs.message}"}}},
    "outputs": {"reply": "${steps.answer.stdout}"}}}


def test(hx):
    s, b = hx.server, hx.browser
    for g in (UNIT, PIPELINE, QUICK, BROKEN, APPROVAL, REVIEW):
        s.register(g)
    for _ in range(3):
        s.wait_status(s.start_execution("quick")["id"], "completed")
    s.wait_status(s.start_execution("broken")["id"], "failed")
    stopped = s.start_execution("pipeline")["id"]
    wait_for(lambda: s.execution(stopped)["steps"]["package"]["status"] == "running", 10, "package to run")
    s.ok("POST", f"/v1/executions/{stopped}/stop", {"wait": 15})
    running = s.start_execution("pipeline")["id"]
    s.ok("POST", "/v1/agents", AGENT)
    for m in ("actor runtimes", "supervision trees"):
        s.ok("POST", "/v1/agents/helper/messages", {"message": m})
    w1 = hx.start_worker("gpu-1", slots=4)
    w2 = hx.start_worker("cpu-2", slots=2)
    wait_for(lambda: len(s.ok("GET", "/v1/nodes")["items"]) == 3, 20, "two workers to join")

    # token prompt
    b.open("")
    b.one("token-input")
    b.shot("01-token-prompt")
    b.one("token-input").send_keys("ta")
    b.click("token-submit")

    # executions list
    b.wait(lambda: len(b.q("exec-row")) >= 6, 10, "the execution rows")
    b.wait(lambda: all(e.text not in ("\u2026", "") for e in b.q("status-count-n")), 10, "the counts per status")
    b.shot("02-executions")

    # an execution: DAG, tree, limits, live
    b.go(f"#/executions/{running}")
    b.one("step-node", step="report")
    b.wait(lambda: b.q("step-node", step="test", exec=child_of(s, running)), 15, "the child's DAG")
    b.wait(lambda: b.q("step-node", step="package", status="running"), 10, "package running")
    b.one("limits")
    b.shot("03-execution-dag")
    b.full_shot("03b-execution-full")

    # the step panel
    b.click("step-node", step="fetch")
    b.wait(lambda: "fetched part 3" in b.text("step-stdout"), 10, "the step's stdout in the panel")
    b.shot("04-step-panel")

    # a stopped execution with its outcome-like reasons
    b.go(f"#/executions/{stopped}")
    b.wait(lambda: b.text("exec-status-text") == "stopped", 10, "the stopped execution")
    b.click("step-node", step="package")
    b.one("step-reason")
    b.shot("05-execution-stopped")

    # graph view
    b.go("#/graphs/pipeline")
    b.one("step-node", step="report")
    b.wait(lambda: len(b.q("exec-row")) >= 2, 10, "the graph's executions")
    b.shot("06-graph")

    # agents
    b.go("#/agents")
    b.one("agent-row", name="helper")
    b.shot("07-agents")
    b.go("#/agents/helper")
    b.wait(lambda: len(b.q("agent-message")) == 4, 10, "the conversation")
    b.shot("08-agent-conversation")

    # nodes: one worker up, one lost
    b.go("#/nodes")
    b.one("nodes-row", name="cpu-2")
    hx.stop_worker(w2)
    b.wait(lambda: b.q("nodes-row", name="cpu-2", state="lost"), 20, "cpu-2 shown lost")
    b.one("nodes-row", name="gpu-1", state="up")
    b.shot("09-nodes")

    # the inbox of waits
    waiting = s.start_execution("approval_flow", {"topic": "Q3"})["id"]
    wait_for(lambda: s.ok("GET", "/v1/waits")["items"], 20, "the approval armed")
    review = s.start_execution("review")["id"]
    wait_for(lambda: len(s.ok("GET", "/v1/waits")["items"]) == 2, 20, "the review armed")
    b.go("#/waits")
    b.one("wait-card", exec=waiting)
    b.one("wait-form")
    b.wait(lambda: b.text("waits-count") == "2", 20, "the Waiting count")
    b.shot("16-waits")
    b.go(f"#/executions/{review}")
    b.wait(lambda: b.q("step-node", step="review", status="waiting"), 10, "the waiting step")
    b.click("step-node", step="review")
    b.one("step-answer-link")
    b.shot("16b-execution-waiting")

    # phone width
    b.driver.set_window_size(390, 844)
    b.go("#/executions")
    b.wait(lambda: len(b.q("exec-row")) >= 6, 10, "the rows at 390 px")
    width = b.js("return document.documentElement.scrollWidth")
    assert width <= 390, f"the list scrolls sideways at 390 px ({width} px wide)"
    b.shot("10-phone-executions")
    b.go(f"#/executions/{running}")
    b.one("step-node", step="report")
    width = b.js("return document.documentElement.scrollWidth")
    assert width <= 390, f"the execution page scrolls sideways at 390 px ({width} px wide)"
    b.shot("11-phone-execution")
    b.click("step-node", step="fetch")
    b.wait(lambda: "fetched part 3" in b.text("step-stdout"), 10, "the step panel at 390 px")
    b.shot("12-phone-step-panel")
    for route, name, hook in (("#/agents/helper", "13-phone-agent", "agent-message"), ("#/nodes", "14-phone-nodes", "nodes-row"),
                              ("#/graphs/pipeline", "15-phone-graph", "step-node"), ("#/waits", "17-phone-waits", "wait-card")):
        b.go(route)
        b.wait(lambda: b.q(hook), 10, f"{route} at 390 px")
        width = b.js("return document.documentElement.scrollWidth")
        assert width <= 390, f"{route} scrolls sideways at 390 px ({width} px wide)"
        b.shot(name)
    b.driver.set_window_size(1280, 800)
    hx.stop_worker(w1)
    names = sorted(p.name for p in hx.out.glob("*.png"))
    print(f"screenshots in {hx.out}: {', '.join(names)}")


def child_of(s, exec_id):
    tree = s.ok("GET", f"/v1/executions/{exec_id}/tree")
    return tree["children"][0]["id"] if tree["children"] else "none"


if __name__ == "__main__":
    main(test, "screenshots", cluster=True)
