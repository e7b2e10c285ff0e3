#!/usr/bin/python3
"""test_users.py: tokens and owners.

Alice has a graph, executions and an agent. Signed in with Bob's token the
dashboard shows none of them: empty lists, and Alice's execution, graph
and agent pages say "not found". The token lives in sessionStorage only
(never in a URL), a page without a token shows only the prompt, a bad token
returns to the prompt, and a token that stops working mid-session (any
401) sends the user back to the prompt with a message.
"""

from harness import main

G = {"name": "secret-graph", "steps": {"a": {"fn": "sleep", "with": {"ms": 60000}}}}
AGENT = {"name": "alice-agent", "graph": {"name": "aa", "inputs": ["message"], "steps": {"r": {"fn": "echo", "with": {"v": 1}}},
                                          "outputs": {"reply": "${steps.r.v}"}}}


def test(hx):
    s, b = hx.server, hx.browser
    s.register(G)
    xid = s.start_execution("secret-graph")["id"]
    s.ok("POST", "/v1/agents", AGENT)

    # no token: only the prompt, no data
    b.open("#/executions")
    b.one("token-input")
    assert not b.q("exec-row") and not b.q("exec-table"), "no data without a token"
    assert b.js("return document.querySelector('#nav').hidden"), "no navigation without a token"

    # a bad token: back to the prompt with a message
    b.one("token-input").send_keys("not-a-token")
    b.click("token-submit")
    b.one("token-error")
    err_text = b.text("token-error")
    assert "refused" in err_text, err_text
    assert b.js("return sessionStorage.getItem('canopy.token')") is None, "a refused token is forgotten"

    # Bob sees none of Alice's resources
    b.one("token-input").send_keys("tb")
    b.click("token-submit")
    b.one("list-empty")
    b.wait(lambda: all(e.text == "0" for e in b.q("status-count-n")), 10, "zero counts for bob")
    assert not b.q("exec-row")
    assert "tb" not in b.driver.current_url and "token" not in b.driver.current_url, b.driver.current_url
    assert b.js("return sessionStorage.getItem('canopy.token')") == "tb"
    assert b.js("return localStorage.length") == 0, "nothing in localStorage"
    b.go(f"#/executions/{xid}")
    b.wait(lambda: "No execution" in b.driver.find_element("css selector", "main").text, 10, "bob gets not found for alice's execution")
    assert not b.q("step-node"), "no step of alice's drawn for bob"
    b.go("#/graphs/secret-graph")
    b.wait(lambda: "No graph" in b.driver.find_element("css selector", "main").text, 10, "bob gets not found for alice's graph")
    b.go("#/agents")
    b.one("agents-empty")
    b.go("#/agents/alice-agent")
    b.wait(lambda: "No agent" in b.driver.find_element("css selector", "main").text, 10, "bob gets not found for alice's agent")
    b.shot("users-bob")

    # Alice, the same browser tab after "Forget token"
    b.click("signout")
    b.one("token-input").send_keys("ta")
    b.click("token-submit")
    b.go("#/executions")
    b.one("exec-row", id=xid)

    # the token stops working mid-session (any 401): back to the prompt
    b.js("sessionStorage.setItem('canopy.token', 'revoked')")
    b.one("token-error", timeout=10)  # the next poll answers 401
    assert "refused" in b.text("token-error")
    assert not b.q("exec-row"), "the data is gone with the prompt"
    assert b.js("return sessionStorage.getItem('canopy.token')") is None
    b.shot("users-401-prompt")

    # a reload keeps the session's token (sessionStorage), a new tab-less session does not
    b.one("token-input").send_keys("ta")
    b.click("token-submit")
    b.one("exec-row", id=xid)
    b.driver.refresh()
    b.one("exec-row", id=xid)


if __name__ == "__main__":
    main(test, "users")
