#!/usr/bin/python3
"""test_loops.py: a loop's iterations on the execution page.

A graph step repeats its child (`repeat` with `max` 3 and `on_max:
complete`, each iteration adding to a carried count). The page of the root
lists the three iterations as children labelled `rounds#1` to `rounds#3`,
the DAG shows a section for each, and an iteration's own page names its
parent step `rounds#2`.
"""

from harness import main

LOOP = {"name": "loop", "steps": {
    "rounds": {
        "graph": {"name": "round", "inputs": ["n"],
                  "steps": {"add": {"fn": "echo", "with": {"n": "${inputs.n}+"}}},
                  "outputs": {"n": "${steps.add.n}"}},
        "with": {"n": "0"},
        "repeat": {"until": {"equals": ["${steps.add.n}", "never"]}, "max": 3, "on_max": "complete",
                   "carry": {"n": "${steps.add.n}"}}},
}, "outputs": {"n": "${steps.rounds.n}"}}


def test(hx):
    s, b = hx.server, hx.browser
    s.register(LOOP)
    b.login("ta")
    xid = s.start_execution("loop", {})["id"]
    s.wait_status(xid, "completed")
    x = s.ok("GET", f"/v1/executions/{xid}/tree")
    assert x["outputs"] == {"n": "0+++"}, x["outputs"]
    kids = sorted(x["children"], key=lambda c: c["iteration"])
    assert [c["iteration"] for c in kids] == [1, 2, 3], kids

    b.go(f"#/executions/{xid}")
    b.wait(lambda: len(b.q("child-step")) == 3, 15, "three iterations in the tree")
    labels = sorted(b.read(lambda: [e.text for e in b.q("child-step")]))
    assert labels == ["via step rounds#1", "via step rounds#2", "via step rounds#3"], labels
    for c in kids:
        b.wait(lambda: b.q("step-node", exec=c["id"], step="add", status="completed"), 15,
               f"iteration {c['iteration']} in the DAG")
    b.shot("loops-1-root")

    second = kids[1]["id"]
    b.go(f"#/executions/{second}")
    b.wait(lambda: "rounds#2" in b.js("return document.body.innerText"), 15, "the parent step rounds#2")


if __name__ == "__main__":
    main(test, "loops")
