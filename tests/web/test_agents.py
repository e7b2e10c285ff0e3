#!/usr/bin/python3
"""test_agents.py: the agent pages.

An agent whose run answers at once, except for messages starting with
"slow", which print a line and then wait. The list shows it with its
on_busy policy; on its page a message sent from the form gets its reply in
the conversation; a slow message shows its run live (the run's id, its step
running, its output line) and Cancel (confirmed in the dialog) stops it.
"""

from harness import main

AGENT = {"name": "echoer", "on_busy": "reject", "graph": {
    "name": "echoer", "inputs": ["message", "history"],
    "steps": {"answer": {"run": ["sh", "-c", 'case "$M" in slow*) echo "thinking about it"; sleep 60;; esac; echo "you said: $M"', "x"],
                         "env": {"M": "${inputs.message}"}}},
    "outputs": {"reply": "${steps.answer.stdout}"}}}


def test(hx):
    s, b = hx.server, hx.browser
    s.ok("POST", "/v1/agents", AGENT)

    b.login("ta")
    b.click("nav-agents")
    row_text = b.read(lambda: b.one("agent-row", name="echoer").text)
    assert "reject" in row_text, f"on_busy in the list: {row_text!r}"
    b.click("agent-link")
    b.wait(lambda: b.text("agent-on-busy") == "reject", 10, "on_busy on the agent's page")
    b.one("conversation-empty")

    b.one("agent-send-input").send_keys("hello canopy")
    b.click("agent-send-button")
    b.wait(lambda: [m.text for m in b.q("agent-message", role="agent")] and "you said: hello canopy" in b.q("agent-message", role="agent")[-1].text,
           15, "the agent's reply in the conversation")
    msgs = b.read(lambda: [(m.get_attribute("data-role"), m.text) for m in b.q("agent-message")
                           if not m.get_attribute("data-pending")])
    assert [r for r, _ in msgs][-2:] == ["user", "agent"] and "hello canopy" in msgs[-2][1], msgs
    hist = s.ok("GET", "/v1/agents/echoer")["history"]
    assert [h["role"] for h in hist] == ["user", "agent"], hist

    # a slow run, shown live, then cancelled
    b.one("agent-send-input").send_keys("slow question")
    b.click("agent-send-button")
    card = b.wait(lambda: (lambda cs: cs[-1] if cs else None)(b.q("agent-run-live")), 10, "the run card")
    b.wait(lambda: card.get_attribute("data-exec"), 10, "the run's id on the card")
    run_id = card.get_attribute("data-exec")
    b.wait(lambda: "thinking about it" in b.text("agent-run-output"), 10, "the run's output line, live")
    b.wait(lambda: "running" in b.text("agent-run-steps"), 10, "the run's step running")
    b.one("agent-run", id=run_id)  # in the live runs list
    b.shot("agents-1-live-run")

    b.click("agent-cancel-button")
    b.confirm()
    b.wait(lambda: b.q("agent-outcome") and b.q("agent-outcome")[0].get_attribute("data-result") == "cancelled", 20, "the cancel's outcome")
    b.wait(lambda: "stopped" in b.text("agent-run-result"), 15, "the run card says it ended stopped")
    assert s.execution(run_id)["status"] == "stopped"
    b.wait(lambda: not b.q("agent-run", id=run_id), 10, "the run gone from the live runs")
    assert len(s.ok("GET", "/v1/agents/echoer")["history"]) == 2, "a cancelled message is not in the history"
    b.shot("agents-2-cancelled")

    # nothing left to cancel
    b.click("agent-cancel-button")
    b.confirm()
    b.wait(lambda: b.q("agent-outcome")[0].get_attribute("data-result") == "no_execution", 10, "no_execution")


if __name__ == "__main__":
    main(test, "agents")
