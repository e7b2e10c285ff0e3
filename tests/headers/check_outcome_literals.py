#!/usr/bin/env python3
"""Fails when an outcome is spelled as a string literal in the C++ of
persistence/, actors/ or runtime/ outside the codecs.

Outcomes are enums (persistence/outcomes.hpp, records.hpp,
actors/agent_reply.hpp): a step reason, a stop result, an execution or step
status, an event type, an agent's reply. Their spellings live in the codec
files listed below and on the wire; everywhere else a literal such as
"stopped" or "execution.stopped" is a second copy of a rule.

Usage: check_outcome_literals.py SOURCE_DIR
"""
import pathlib
import re
import sys

REASONS = ["requested", "parent_stopped", "child_stopped", "sibling_failed",
           "budget_exceeded", "interrupted", "node_lost", "step_failed",
           "condition_false", "needs_skipped", "wait_timeout", "rejected",
           "max_iterations"]
STOP_RESULTS = ["no_execution", "stopping", "stopped"]
STATUSES = ["running", "completed", "failed", "pending", "queued", "waiting", "skipped"]
REPLIES = ["cancelled", "busy"]
WORDS = REASONS + STOP_RESULTS + STATUSES + REPLIES
LITERAL = re.compile(r'"(' + "|".join(WORDS) + r'|(?:execution|step|stop|signal|agent|subtree)'
                     r'\.[a-z_]+)"')

# The codecs: the only files that spell outcomes.
CODECS = {
    "persistence/outcomes.cpp": "reasons, stop modes and results, event types",
    "persistence/records.cpp": "statuses; the schema-1 text codec",
    "persistence/records_encode.cpp": "the stored record codec",
    "persistence/records_decode.cpp": "the stored record codec",
    "persistence/records_json.cpp": "the schema-1 text codec",
    "actors/agent_reply.cpp": "agent replies and cancel results",
    "actors/execution/outcomes.cpp": "turn verdicts",
    "actors/error.cpp": "the actor layer's error codes",
    "runtime/lib/facade_error.cpp": "the public API's error codes",
    "runtime/lib/facade_records.cpp": "the public API's outcomes",
    # The CLI's display model: the tree and `show` draw the statuses of the
    # wire's documents and events as they spell them.
    "runtime/cli/render.cpp": "the CLI's display model",
    "runtime/cli/render.hpp": "the CLI's display model",
    "runtime/cli/render_show.cpp": "the CLI's display model",
    "runtime/cli/live_frame.cpp": "the CLI's display model",
}
CODEC_DIRS = ["runtime/include/"]  # the public API documents its own spellings

# Literals that are not outcomes although they are spelled like one.
ALLOWED = {
    ("persistence/store.cpp", "pending"): "the name of an LMDB database",
    ("actors/execution/machine.cpp", "running"): "the machine's phase names",
    ("actors/execution/machine.cpp", "completed"): "the machine's phase names",
    ("actors/execution/machine.cpp", "failed"): "the machine's phase names",
    ("actors/execution/machine.cpp", "skipped"): "the machine's phase names",
    ("actors/execution/machine.cpp", "waiting"): "the machine's phase names",
    ("runtime/node/worker.cpp", "running"): "a key of the node document",
    ("runtime/server/http_api_executions.cpp", "stopped"): "a key of the stop answer",
    ("runtime/server/http_api_executions.cpp", "pending"): "a key of the stop answer",
    ("runtime/server/http_api_executions.cpp", "waiting"): "the `waiting` filter of a query",
    ("runtime/cli/cli_ls.cpp", "waiting"): "the `waiting` value of --status",
    ("persistence/retention.hpp", "completed"): "the retention config's keys, in its example",
    ("persistence/retention.hpp", "failed"): "the retention config's keys, in its example",
    ("persistence/retention.hpp", "stopped"): "the retention config's keys, in its example",
}


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    for layer in ("persistence", "actors", "runtime"):
        for path in sorted((root / layer).rglob("*")):
            if path.suffix not in (".cpp", ".hpp"):
                continue
            rel = path.relative_to(root).as_posix()
            if rel in CODECS or any(rel.startswith(d) for d in CODEC_DIRS):
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for m in LITERAL.finditer(line):
                    if (rel, m.group(1)) in ALLOWED:
                        continue
                    problems.append(f"{rel}:{n}: outcome literal \"{m.group(1)}\": "
                                    f"use its enum ({line.strip()})")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} outcome literal(s) outside the codecs "
              "(tests/headers/check_outcome_literals.py lists the codecs)")
        return 1
    print("no outcome literal outside the codecs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
