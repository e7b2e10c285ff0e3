#!/usr/bin/python3
"""test_models.py: what model calls used, per step and per tree.

Two priced `llm` steps (1,000 per million tokens) answer from the provider
double. The execution page's header sums the tree's calls, tokens and
spend; a step's panel shows its own; the budget meter counts the spend.
"""

from harness import main

GRAPH = {"name": "asked", "limits": {"budget": 1}, "steps": {
    "ask": {"llm": {"model": "m", "max_tokens": 100,
                    "messages": [{"role": "user", "content": "Outline a brief."}]}},
    "review": {"needs": ["ask"], "llm": {"model": "m", "max_tokens": 100,
                                         "messages": [{"role": "user", "content": "${steps.ask.content}"}]}},
}}

REPLIES = [
    {"content": "An outline.", "chunks": 3, "usage": {"prompt_tokens": 80, "completion_tokens": 20}},
    {"content": "Looks right.", "usage": {"prompt_tokens": 50, "completion_tokens": 10}},
]


def test(hx):
    s, b = hx.server, hx.browser
    s.register(GRAPH)
    b.login("ta")
    xid = s.start_execution("asked", {})["id"]
    s.wait_status(xid, "completed")
    tree = s.ok("GET", f"/v1/executions/{xid}/tree")
    model = tree["model"]
    assert (model["calls"], model["prompt_tokens"], model["completion_tokens"], model["tokens"]) == (2, 130, 30, 160), model
    assert abs(model["spend"] - 0.16) < 1e-9, model

    b.go(f"#/executions/{xid}")
    b.wait(lambda: b.text("exec-model-use"), 15, "the tree's model use in the header")
    assert b.text("exec-model-use") == "2 calls \u00b7 160 tokens (130 in, 30 out) \u00b7 spent 0.16", b.text("exec-model-use")
    # The budget meter comes with the graph document, loaded after the tree.
    b.wait(lambda: b.q("limit", limit="budget"), 15, "the budget meter")
    budget = b.read(lambda: b.q("limit", limit="budget")[0].text)
    assert "0.16 of 1 spent" in budget, budget

    b.click("step-node", exec=xid, step="ask")
    b.wait(lambda: b.text("step-model-use"), 15, "the step's model use in its panel")
    assert b.text("step-model-use") == "100 tokens (80 in, 20 out) \u00b7 spent 0.1", b.text("step-model-use")
    assert "\u00b7 llm m" in b.read(lambda: b.q("step-panel")[0].text)
    b.shot("models-1-spend")


if __name__ == "__main__":
    main(test, "models", model_replies=REPLIES, model_price={"input": 1000, "output": 1000})
