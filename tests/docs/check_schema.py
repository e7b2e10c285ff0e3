#!/usr/bin/python3
"""Checks the JSON Schemas of runtime/schema against canopy itself.

    /usr/bin/python3 check_schema.py --canopy CANOPY --source-dir SOURCE_DIR

1. Each schema (graph, config, tools) is valid JSON Schema 2020-12
   (Draft202012Validator.check_schema), and every property it declares has a
   description.
2. Graphs: every graph document of the repository that `canopy validate`
   accepts (tests/fixtures, examples, tests/fuzz/corpus/graph, the graphs in
   the C++ tests' raw strings), or refuses only for what the schema cannot
   know (an unregistered tool, a graph file that cannot be read), the schema
   accepts. The graphs built here (one per step kind and field) both accept.
3. Invalid graphs: each file of tests/fixtures/invalid is listed as
   STRUCTURAL (the schema rejects it too) or SEMANTIC (only `canopy
   validate` can tell; the schema accepts it). The structural graphs built
   here are rejected by both.
4. Config (`canopy serve --config`): runtime/dist/node.json, the examples'
   node.json.in, the fuzz corpus's configs that only canopy refuses and the
   good configs built here satisfy the schema, and a server starts with
   those built here (stopped once it listens); the bad ones (corpus and
   built here) are refused by `canopy serve --config` and by the schema.
5. Tools files (`canopy worker --tools`): good ones satisfy the schema and a
   worker reads them (stopped once it starts joining); bad ones are refused
   by `canopy worker --tools` and by the schema.
6. A top-level "$schema" key: the schemas accept it, and so must canopy in
   graph, config and tools files.

Exit 0 with a summary; exit 1 with each failed check on a line of its own.
Needs Debian's python3-jsonschema (4.10): run it with /usr/bin/python3.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

from jsonschema import Draft202012Validator

# -- the invalid fixtures ---------------------------------------------------------

# Refused for their structure: the schema refuses them too (malformed.json
# is not JSON at all: no schema sees it).
STRUCTURAL = {
    "bad_duration.json": "a duration that does not match NUMBER+UNIT",
    "bad_type.json": "retries below 0",
    "malformed.json": "not JSON",
    "malformed_ref.json": "an unterminated ${ in a string",
    "message_not_agent.json": "message on a step that is not an agent step",
    "two_kinds.json": "a step with two kind keys",
    "unknown_key.json": "an unknown step key",
    "zero_kinds.json": "a step without a kind key",
}

# Refused for what only canopy knows: the schema accepts them.
SEMANTIC = {
    "cycle.json": "a dependency cycle",
    "missing_child_input.json": "with does not give a child graph's input",
    "not_upstream_ref.json": "a reference to a step that is not upstream",
    "self_include.json": "a graph file that includes itself",
    "self_need.json": "a step that needs itself",
    "too_deep.json": "children deeper than limits.max_depth",
    "unknown_fn.json": "a function that is not registered",
    "unknown_input_ref.json": "a reference to an undeclared input",
    "unknown_need.json": "needs naming an unknown step",
    "unknown_step_ref.json": "a reference to an unknown step",
    "unknown_tool.json": "a tool that is not registered",
}

# Not a graph: the fixtures' expectations.
NOT_GRAPHS = {"expected.json"}

# `canopy validate` messages of what a schema cannot know about a graph that
# is otherwise good (validate without --config knows no tools; files are
# relative).
OUTSIDE_THE_DOCUMENT = (
    re.compile(r"unknown tool '[^']*' \(no tools are registered on this node\)"),
    re.compile(r"cannot read graph file"),
)

# -- graphs built here ------------------------------------------------------------

FULL_GRAPH = {
    "name": "everything",
    "inputs": ["topic", "n-2"],
    "limits": {"max_depth": 4, "max_steps": 50, "budget": 2.5, "deadline": "2h"},
    "steps": {
        "a": {"run": ["sh", "-c", "echo \"$1\" $$HOME", "a", "${inputs.topic} $${literal}"],
              "env": {"X": "${inputs.n-2}"}, "stdin": "in", "cwd": "/tmp",
              "timeout": "10s", "retries": 2, "retry_delay": "250ms", "cost": 0.5,
              "grace": {"interrupt": "1s", "terminate": "2s"}, "with": {"k": [1, {"x": None}]}},
        "b": {"fn": "echo", "needs": ["a"], "with": {"v": "${steps.a.json.items.0}"},
              "when": {"equals": ["${steps.a.exit_code}", 0]}},
        "c": {"fn": "sleep", "with": {"ms": 1}, "needs": ["a", "b"], "after": "any_completed",
              "when": {"not": {"in": ["${steps.b.v}", [1, "x", None]]}}},
        "d": {"agent": "critic", "message": {"text": "${steps.b.v}", "n": 1}, "needs": ["b"]},
        "e": {"plan": ["python3", "plan.py", "${inputs.topic}"]},
        "f": {"graph": {"name": "child", "inputs": ["x"],
                        "steps": {"s": {"fn": "echo", "with": {"x": "${inputs.x}"}}},
                        "outputs": {"x": "${steps.s.x}"}},
              "with": {"x": "${inputs.topic}"},
              "repeat": {"until": "${steps.s.done}", "max": 3, "on_max": "complete",
                         "carry": {"x": "${steps.s.x}"}}},
        "g": {"graph": {"steps": {"s": {"fn": "noop"}}}, "repeat": {"max": 2,
                                                                     "on_max": "complete"}},
        "h": {"wait": {"signal": "approval.v1", "prompt": "ok ${steps.a.stdout}?",
                       "schema": {"type": "object", "required": ["ok"],
                                  "properties": {"ok": {"type": "boolean"},
                                                 "n": {"type": ["integer", "null"],
                                                       "minimum": 0}},
                                  "additionalProperties": False},
                       "options": {"Yes ✓": {"ok": True}, "No": {"ok": False}},
                       "timeout": "1h", "on_timeout": "default", "default": {"ok": False},
                       "approvers": ["alice", "bob"]},
              "needs": ["a"]},
        "i": {"wait": {"signal": "go", "on_timeout": "fail", "timeout": "5m"}},
        "j": {"llm": {"provider": "local", "model": "m", "temperature": 0.2,
                      "max_tokens": 100, "response_format": {"type": "json_object"},
                      "messages": [
                          {"role": "system", "content": "be brief"},
                          {"role": "user", "content": "about ${inputs.topic}"},
                          {"role": "assistant", "content": None,
                           "tool_calls": [{"id": "c1", "type": "function",
                                           "function": {"name": "f", "arguments": "{}"}}]},
                          {"role": "tool", "tool_call_id": "c1", "content": "[]"},
                          {"role": "assistant", "content": "done"}]},
              "timeout": "1m", "retries": 1, "retry_delay": "1s", "needs": ["a"],
              "when": "${steps.a.json.go}"},
    },
    "outputs": {"all": {"a": "${steps.a}", "list": ["${steps.b.v}", 1, True]},
                "topic": "${inputs.topic}"},
}

# Each is refused by `canopy validate` for its structure, with this text.
BAD_GRAPHS = [
    ("not an object", [], "must be a JSON object"),
    ("no steps", {"name": "x"}, "missing 'steps'"),
    ("empty steps", {"steps": {}}, "at least one step"),
    ("unknown top-level key", {"stepz": {}, "steps": {"a": {"fn": "noop"}}},
     "unknown key 'stepz'"),
    ("empty name", {"name": "", "steps": {"a": {"fn": "noop"}}}, "must not be empty"),
    ("bad input name", {"inputs": ["a b"], "steps": {"a": {"fn": "noop"}}},
     "invalid input name"),
    ("duplicate input", {"inputs": ["a", "a"], "steps": {"a": {"fn": "noop"}}},
     "duplicate input"),
    ("unknown limit", {"limits": {"max_time": "1s"}, "steps": {"a": {"fn": "noop"}}},
     "unknown key 'max_time'"),
    ("max_steps 0", {"limits": {"max_steps": 0}, "steps": {"a": {"fn": "noop"}}},
     "integer >= 1"),
    ("negative budget", {"limits": {"budget": -1}, "steps": {"a": {"fn": "noop"}}},
     "number >= 0"),
    ("deadline as number", {"limits": {"deadline": 10}, "steps": {"a": {"fn": "noop"}}},
     "expected a duration"),
    ("bad step id", {"steps": {"a b": {"fn": "noop"}}}, "invalid step id"),
    ("step not an object", {"steps": {"a": "noop"}}, "a step must be an object"),
    ("empty fn", {"steps": {"a": {"fn": ""}}}, "non-empty string"),
    ("empty run", {"steps": {"a": {"run": []}}}, "non-empty array"),
    ("run of numbers", {"steps": {"a": {"run": ["echo", 1]}}}, "expected a string"),
    ("plan of a number", {"steps": {"a": {"plan": 3}}}, "a tool name or a non-empty argv"),
    ("graph of a number", {"steps": {"a": {"graph": 3}}}, "expected a graph object"),
    ("after without needs", {"steps": {"a": {"fn": "noop", "after": "any_completed"}}},
     "this step has none"),
    ("bad after", {"steps": {"a": {"fn": "noop", "needs": [], "after": "first"}}},
     "all_completed"),
    ("needs of a number", {"steps": {"a": {"fn": "noop", "needs": [1]}}}, "expected a step id"),
    ("env of a number", {"steps": {"a": {"fn": "noop", "env": {"X": 1}}}}, "expected a string"),
    ("with of an array", {"steps": {"a": {"fn": "noop", "with": []}}}, "expected an object"),
    ("negative cost", {"steps": {"a": {"fn": "noop", "cost": -0.5}}}, "number >= 0"),
    ("unknown grace key", {"steps": {"a": {"fn": "noop", "grace": {"kill": "1s"}}}},
     "unknown key 'kill'"),
    ("with scope in a graph", {"steps": {"a": {"fn": "echo", "with": {"x": "${with.y}"}}}},
     "only valid in tool argv templates"),
    ("unknown reference scope", {"steps": {"a": {"fn": "echo", "with": {"x": "${env.HOME}"}}}},
     "unknown scope"),
    ("input reference with a path", {"inputs": ["t"],
                                     "steps": {"a": {"fn": "echo", "with": {"x": "${inputs.t.x}"}}}},
     "only step references take a path"),
    ("empty reference path component", {"steps": {"a": {"fn": "noop"}, "b": {
        "fn": "echo", "needs": ["a"], "with": {"x": "${steps.a..x}"}}}}, "empty path component"),
    ("bad condition", {"steps": {"a": {"fn": "noop", "when": {"all": []}}}},
     "unknown condition"),
    ("condition of two keys", {"steps": {"a": {"fn": "noop", "when": {
        "not": "${steps.a.x}", "in": []}}}}, "object with 2 keys"),
    ("condition text around a reference", {"inputs": ["t"], "steps": {"a": {
        "fn": "noop", "when": "is ${inputs.t}"}}}, "exactly one reference"),
    ("reference in a literal", {"inputs": ["t"], "steps": {"a": {
        "fn": "noop", "when": {"equals": ["${inputs.t}", "${inputs.t}"]}}}},
     "literal JSON"),
    ("in without an array", {"inputs": ["t"], "steps": {"a": {
        "fn": "noop", "when": {"in": ["${inputs.t}", 3]}}}}, "an array of values"),
    ("repeat on a fn step", {"steps": {"a": {"fn": "noop", "repeat": {"max": 2}}}},
     "only valid on graph steps"),
    ("repeat without max", {"steps": {"a": {"graph": {"steps": {"s": {"fn": "noop"}}},
                                            "repeat": {"on_max": "complete"}}}},
     "missing 'max'"),
    ("repeat max 0", {"steps": {"a": {"graph": {"steps": {"s": {"fn": "noop"}}},
                                      "repeat": {"max": 0, "on_max": "complete"}}}},
     "integer from 1 to 1000"),
    ("repeat without until", {"steps": {"a": {"graph": {"steps": {"s": {"fn": "noop"}}},
                                              "repeat": {"max": 2}}}}, "missing 'until'"),
    ("repeat referencing inputs", {"inputs": ["t"], "steps": {"a": {
        "graph": {"steps": {"s": {"fn": "noop"}}},
        "repeat": {"max": 2, "until": "${inputs.t}"}}}}, "repeat may only reference"),
    ("wait without signal", {"steps": {"a": {"wait": {"prompt": "?"}}}}, "missing 'signal'"),
    ("bad signal", {"steps": {"a": {"wait": {"signal": "a b"}}}}, "expected a signal name"),
    ("wait with a timeout field", {"steps": {"a": {"wait": {"signal": "s"}, "timeout": "1s"}}},
     "a wait step takes no 'timeout'"),
    ("wait with retries", {"steps": {"a": {"wait": {"signal": "s"}, "retries": 1}}},
     "a wait step takes no 'retries'"),
    ("wait timeout 0", {"steps": {"a": {"wait": {"signal": "s", "timeout": "0s"}}}},
     "longer than 0"),
    ("on_timeout default without timeout", {"steps": {"a": {"wait": {
        "signal": "s", "on_timeout": "default", "default": 1}}}}, "needs a 'timeout'"),
    ("on_timeout default without default", {"steps": {"a": {"wait": {
        "signal": "s", "timeout": "1s", "on_timeout": "default"}}}}, "missing 'default'"),
    ("default without on_timeout", {"steps": {"a": {"wait": {"signal": "s", "default": 1}}}},
     "applies only with"),
    ("wait schema with pattern", {"steps": {"a": {"wait": {
        "signal": "s", "schema": {"type": "string", "pattern": "x"}}}}}, "not supported"),
    ("wait schema with an unknown type", {"steps": {"a": {"wait": {
        "signal": "s", "schema": {"type": "text"}}}}}, "unknown type"),
    ("empty option label", {"steps": {"a": {"wait": {"signal": "s", "options": {"": 1}}}}},
     "must not be empty"),
    ("approver twice", {"steps": {"a": {"wait": {"signal": "s", "approvers": ["a", "a"]}}}},
     "listed twice"),
    ("llm without model", {"steps": {"a": {"llm": {"messages": [
        {"role": "user", "content": "hi"}]}}}}, "missing 'model'"),
    ("llm with env", {"steps": {"a": {"llm": {"model": "m", "messages": [
        {"role": "user", "content": "hi"}]}, "env": {}}}}, "an llm step takes no 'env'"),
    ("llm bad role", {"steps": {"a": {"llm": {"model": "m", "messages": [
        {"role": "robot", "content": "hi"}]}}}}, "expected one of"),
    ("llm user message with tool_calls", {"steps": {"a": {"llm": {"model": "m", "messages": [
        {"role": "user", "content": "hi", "tool_calls": []}]}}}}, "unknown key 'tool_calls'"),
    ("llm tool message without id", {"steps": {"a": {"llm": {"model": "m", "messages": [
        {"role": "tool", "content": "x"}]}}}}, "the id of the tool call"),
    ("llm temperature 3", {"steps": {"a": {"llm": {"model": "m", "temperature": 3, "messages": [
        {"role": "user", "content": "hi"}]}}}}, "from 0 to 2"),
    ("llm max_turns without tools", {"steps": {"a": {"llm": {"model": "m", "max_turns": 2,
                                                             "messages": [
        {"role": "user", "content": "hi"}]}}}}, "max_turns needs 'tools'"),
    ("llm bad provider", {"steps": {"a": {"llm": {"model": "m", "provider": "a/b", "messages": [
        {"role": "user", "content": "hi"}]}}}}, "expected a provider name"),
]

# -- configs and tools files built here ---------------------------------------------

# Good configs that a server starts with (in a folder holding `c.token`, with
# CANOPY_B and OPENAI_API_KEY set; `home` and the addresses are replaced).
GOOD_CONFIGS = [
    ("every key but the HTTPS files", {
        "home": "/var/lib/canopy", "listen": "[::1]:8080",
        "users": {"a": {"token": "t-1"}, "b": {"token_env": "CANOPY_B"},
                  "c": {"token_file": "c.token"}},
        "allow_inline_commands": True, "max_parallel": 8, "max_request_bytes": 1024,
        "tools": {"w": {"argv": ["w", "${with.x}", "${inputs.y}"], "max_parallel": 1,
                        "timeout": "1m", "grace": {"interrupt": "1s"}, "description": "d",
                        "parameters": {"type": "object", "properties": {"x": {"type": "string"}},
                                       "required": ["x"]}},
                  "with space": {"argv": ["true"]}},
        "cluster": {"listen": "0.0.0.0:4242", "secret": "s", "heartbeat": "500ms",
                    "timeout": "3s", "tls": False},
        "quotas": {"live_executions": 0, "graphs": 10},
        "insecure_http": False,
        "retention": {"completed": "7d", "failed": "30d", "stopped": "12h", "interval": "1h"},
        "providers": {"default": {"base_url": "https://api.example.com/v1",
                                  "api_key_env": "OPENAI_API_KEY", "max_retries": 5,
                                  "max_parallel": 8, "price": {"input": 0.15, "output": 0.6}},
                      "local": {"base_url": "http://127.0.0.1:8081/v1"}}}),
    ("a user and a cluster", {"users": {"a": {"token": "t"}},
                              "cluster": {"listen": "127.0.0.1:4242", "secret": "s"}}),
]

# Good configs that only the schema reads (canopy would read the PEM files).
GOOD_CONFIGS_SCHEMA_ONLY = [
    ("HTTPS and cluster TLS", {
        "listen": "0.0.0.0:8443", "tls_cert": "cert.pem", "tls_key": "key.pem",
        "users": {"a": {"token": "t"}},
        "cluster": {"secret": "s", "tls": {"certificate": "c.pem", "key": "k.pem",
                                           "ca": "ca.pem"}}}),
]

# Each is refused by `canopy serve --config` for its structure, with this text.
BAD_CONFIGS = [
    ("not an object", [], "must be a JSON object"),
    ("unknown key", {"port": 1}, "unknown key 'port'"),
    ("listen without a port", {"listen": "localhost"}, "HOST:PORT"),
    ("bare IPv6 listen", {"listen": "::1:80"}, "HOST:PORT"),
    ("max_parallel 0", {"max_parallel": 0}, "integer >= 1"),
    ("user with two tokens", {"users": {"a": {"token": "x", "token_env": "X"}}},
     "exactly one of"),
    ("user without a token", {"users": {"a": {}}}, "missing 'token'"),
    ("token with a line break", {"users": {"a": {"token": "x\ny"}}}, "control character"),
    ("inline commands as a string", {"allow_inline_commands": "yes"}, "true or false"),
    ("quota below 0", {"quotas": {"graphs": -1}}, "integer >= 0"),
    ("unknown quota", {"quotas": {"steps": 1}}, "unknown key 'steps'"),
    ("tls_cert alone", {"tls_cert": "c.pem"}, "missing 'tls_key'"),
    ("bad retention age", {"retention": {"completed": "1w"}}, "bad age"),
    ("retention interval under 1s", {"retention": {"interval": "500ms"}}, "at least 1s"),
    ("cluster tls true", {"cluster": {"secret": "s", "tls": True}}, "or false"),
    ("cluster tls without ca", {"cluster": {"secret": "s", "tls": {
        "certificate": "c", "key": "k"}}}, "missing 'ca'"),
    ("cluster heartbeat 0", {"cluster": {"heartbeat": "0ms"}}, "longer than 0ms"),
    ("tool without argv", {"tools": {"t": {"timeout": "1s"}}}, "missing 'argv'"),
    ("tool with a step reference", {"tools": {"t": {"argv": ["x", "${steps.a.stdout}"]}}},
     "may only use ${with.KEY}"),
    ("tool timeout 0", {"tools": {"t": {"argv": ["x"], "timeout": "0s"}}}, "longer than 0ms"),
    ("tool parameters of type string", {"tools": {"t": {"argv": ["x"], "parameters": {
        "type": "string"}}}}, "of type \"object\""),
    ("parameters of a tool a model cannot name", {"tools": {"a b": {"argv": ["x"], "parameters": {
        "type": "object"}}}}, "needs a name of letters"),
    ("provider without base_url", {"providers": {"p": {"max_retries": 1}}},
     "missing 'base_url'"),
    ("provider ftp URL", {"providers": {"p": {"base_url": "ftp://x/v1"}}},
     "http:// or https://"),
    ("provider bad name", {"providers": {"a.b": {"base_url": "http://127.0.0.1:1/v1"}}},
     "invalid provider name"),
    ("provider max_retries 21", {"providers": {"p": {"base_url": "http://127.0.0.1:1",
                                                     "max_retries": 21}}}, "from 0 to 20"),
    ("provider price without output", {"providers": {"p": {"base_url": "http://127.0.0.1:1",
                                                           "price": {"input": 1}}}},
     "non-negative prices"),
]

GOOD_TOOLS_FILES = [
    ("tools and cluster", {"tools": {"t": {"argv": ["t", "${with.x}"], "timeout": "5s"}},
                           "cluster": {"secret": "s", "heartbeat": "1s", "timeout": "5s",
                                       "tls": False}}),
    ("tools only", {"tools": {}}),
]

# Each is refused by `canopy worker --tools` for its structure, with this text.
BAD_TOOLS_FILES = [
    ("not an object", [], "must be a JSON object"),
    ("node config key", {"users": {}}, "holds only: tools, cluster"),
    ("cluster listen", {"cluster": {"listen": "127.0.0.1:1"}}, "unknown key 'listen'"),
    ("empty argv", {"tools": {"t": {"argv": []}}}, "non-empty array"),
    ("unknown tool key", {"tools": {"t": {"argv": ["x"], "retries": 1}}}, "unknown key 'retries'"),
    ("empty tool name", {"tools": {"": {"argv": ["x"]}}}, "must not be empty"),
    ("max_parallel 0", {"tools": {"t": {"argv": ["x"], "max_parallel": 0}}}, "integer >= 1"),
]

# -- helpers ------------------------------------------------------------------------


class Checks:
    def __init__(self):
        self.failures = []
        self.count = 0

    def expect(self, ok, what):
        self.count += 1
        if not ok:
            self.failures.append(what)


def load_schema(checks, path):
    with open(path, encoding="utf-8") as f:
        schema = json.load(f)
    try:
        Draft202012Validator.check_schema(schema)
        checks.expect(True, "")
    except Exception as e:  # SchemaError
        checks.expect(False, f"{path}: not a valid JSON Schema 2020-12: {e}")
    checks.expect(schema.get("$schema") == "https://json-schema.org/draft/2020-12/schema",
                  f"{path}: $schema is not draft 2020-12")
    checks.expect(bool(schema.get("$id")), f"{path}: no $id")
    for where in undescribed(schema, schema, ""):
        checks.expect(False, f"{path}: property {where} has no description")
    return Draft202012Validator(schema)


def undescribed(root, node, at):
    """JSON pointers of declared properties without a description (following
    local $refs; the `if` and `not` of a schema only test, they declare nothing)."""
    out = []
    if not isinstance(node, dict):
        return out
    for key, val in node.items():
        where = f"{at}/{key}"
        if key in ("properties", "patternProperties", "$defs") and isinstance(val, dict):
            for name, sub in val.items():
                if key == "properties" and not described(root, sub):
                    out.append(f"{where}/{name}")
                out += undescribed(root, sub, f"{where}/{name}")
        elif key in ("items", "additionalProperties", "propertyNames", "then", "else",
                     "contains", "unevaluatedProperties"):
            out += undescribed(root, val, where)
        elif key in ("allOf", "anyOf", "oneOf", "prefixItems") and isinstance(val, list):
            for i, sub in enumerate(val):
                out += undescribed(root, sub, f"{where}/{i}")
    return out


def described(root, schema):
    """Whether `schema`, or the schema its local $refs lead to, has a description."""
    while isinstance(schema, dict) and "description" not in schema \
            and schema.get("$ref", "").startswith("#/"):
        schema = resolve(root, schema["$ref"])
    return isinstance(schema, dict) and "description" in schema


def resolve(root, ref):
    node = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def schema_errors(validator, doc):
    """The schema's complaints about `doc`, one line each (empty: it is valid)."""
    out = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        path = "".join("/" + str(p) for p in e.absolute_path)
        out.append(f"{path or '/'}: {e.message[:200]}")
    return out


def run(args, timeout=30):
    """(exit code, stdout + stderr) of a command; exit code None on a timeout."""
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return None, (e.output or b"").decode("utf-8", "replace")


class Canopy:
    def __init__(self, binary, tmp):
        self.binary = binary
        self.tmp = tmp
        self.home = os.path.join(tmp, "home")
        os.makedirs(self.home, exist_ok=True)
        self.n = 0

    def write(self, doc, name=None, text=None):
        self.n += 1
        path = os.path.join(self.tmp, name or f"doc{self.n}.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text if text is not None else json.dumps(doc, ensure_ascii=False))
        return path

    def validate(self, path):
        return run([self.binary, "--home", self.home, "validate", path])

    def serve(self, path):
        # A refused config ends at once; one accepted would serve (killed by the timeout).
        return run([self.binary, "--home", self.home, "serve", "--config", path,
                    "--listen", "127.0.0.1:0"], timeout=10)

    def worker(self, path):
        """(exit code, output) of a worker reading the tools file `path`: a refused
        file ends it at once; with an accepted one it logs `event=worker.start` and
        keeps trying to join (port 1 of the loopback, where nothing listens), and is
        stopped then (exit code None)."""
        return self.start(["worker", "--join", "127.0.0.1:1", "--tools", path],
                          "event=worker.start")

    def serve_accepts(self, path, env):
        """(exit code, output) of `canopy serve --config PATH`, stopped (exit code None)
        once it listens."""
        return self.start(["serve", "--config", path, "--listen", "127.0.0.1:0"],
                          "event=listening", env)

    def start(self, args, marker, env=None):
        p = subprocess.Popen([self.binary, "--home", self.home] + args,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env)
        guard = threading.Timer(20, p.kill)
        guard.start()
        lines = []
        try:
            for raw in p.stdout:
                lines.append(raw.decode("utf-8", "replace"))
                if marker in lines[-1]:
                    p.terminate()
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                    return None, "".join(lines)
            return p.wait(), "".join(lines)
        finally:
            guard.cancel()
            p.stdout.close()


def error_messages(output, path):
    """The messages of `canopy validate PATH`'s error lines (`PATH: POINTER: message`)."""
    out = []
    for line in output.splitlines():
        if line.startswith(path + ": "):
            out.append(line[len(path) + 2:])
    return out


def outside_the_document(output, path):
    """Whether every error of `canopy validate` is about what is outside the document."""
    messages = error_messages(output, path)
    return bool(messages) and all(any(p.search(m) for p in OUTSIDE_THE_DOCUMENT)
                                  for m in messages)


def show(lines, limit=3):
    return "; ".join(lines[:limit]) + (f" (+{len(lines) - limit} more)" if len(lines) > limit
                                       else "")


# -- the checks -----------------------------------------------------------------------


def graph_files(src):
    """Every .json file that may be a graph: fixtures, examples, the fuzz corpus."""
    patterns = ["tests/fixtures/valid/**/*.json", "tests/fixtures/stop/**/*.json",
                "examples/**/*.json", "tests/fuzz/corpus/graph/*.json"]
    files = set()
    for p in patterns:
        files.update(glob.glob(os.path.join(src, p), recursive=True))
    return sorted(files)


def embedded_graphs(src):
    """(where, document) of every raw string of the C++ tests that is a JSON object with
    `steps` (raw strings glued to other text are not JSON and are left out)."""
    out = []
    for f in sorted(glob.glob(os.path.join(src, "tests/**/*.cpp"), recursive=True)):
        with open(f, encoding="utf-8", errors="replace") as h:
            text = h.read()
        for m in re.finditer(r'R"\((.*?)\)"', text, re.S):
            try:
                doc = json.loads(m.group(1))
            except ValueError:
                continue
            if isinstance(doc, dict) and "steps" in doc:
                line = text.count("\n", 0, m.start()) + 1
                out.append((f"{os.path.relpath(f, src)}:{line}", doc))
    return out


def check_graphs(checks, canopy, graph, src):
    accepted = outside = 0
    for path in graph_files(src):
        rc, output = canopy.validate(path)
        if rc != 0 and not outside_the_document(output, path):
            continue  # not a graph, or an invalid one (listed in the corpus on purpose)
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        errors = schema_errors(graph, doc)
        rel = os.path.relpath(path, src)
        checks.expect(not errors, f"graph {rel}: canopy validate accepts it "
                                  f"{'' if rc == 0 else '(but for what is outside it) '}"
                                  f"and the schema does not: {show(errors)}")
        accepted += rc == 0
        outside += rc != 0
    embedded = 0
    for where, doc in embedded_graphs(src):
        path = canopy.write(doc)
        rc, output = canopy.validate(path)
        if rc != 0 and not outside_the_document(output, path):
            continue
        embedded += 1
        errors = schema_errors(graph, doc)
        checks.expect(not errors, f"graph in {where}: canopy validate accepts it and the "
                                  f"schema does not: {show(errors)}")
    path = canopy.write(FULL_GRAPH)
    rc, output = canopy.validate(path)
    checks.expect(rc == 0, f"the full graph built here: canopy validate refuses it: {output}")
    errors = schema_errors(graph, FULL_GRAPH)
    checks.expect(not errors, f"the full graph built here: the schema refuses it: "
                              f"{show(errors)}")
    return accepted, outside, embedded


def check_invalid_fixtures(checks, canopy, graph, src):
    folder = os.path.join(src, "tests/fixtures/invalid")
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.json")))
    for name in names:
        if name in NOT_GRAPHS:
            continue
        path = os.path.join(folder, name)
        if name not in STRUCTURAL and name not in SEMANTIC:
            checks.expect(False, f"tests/fixtures/invalid/{name} is in neither STRUCTURAL nor "
                                 f"SEMANTIC of {os.path.basename(__file__)}")
            continue
        rc, output = canopy.validate(path)
        checks.expect(rc not in (0, None), f"invalid/{name}: canopy validate accepts it")
        with open(path, encoding="utf-8") as f:
            try:
                doc = json.load(f)
            except ValueError:
                checks.expect(name in STRUCTURAL,
                              f"invalid/{name}: not JSON, yet listed as SEMANTIC")
                continue
        errors = schema_errors(graph, doc)
        if name in STRUCTURAL:
            checks.expect(bool(errors), f"invalid/{name} ({STRUCTURAL[name]}): the schema "
                                        "accepts it")
        else:
            checks.expect(not errors, f"invalid/{name} ({SEMANTIC[name]}): listed as "
                                      f"semantic, yet the schema refuses it: {show(errors)}")
    for name in list(STRUCTURAL) + list(SEMANTIC):
        checks.expect(name in names, f"{name} is listed but not in tests/fixtures/invalid")
    for what, doc, text in BAD_GRAPHS:
        path = canopy.write(doc)
        rc, output = canopy.validate(path)
        checks.expect(rc not in (0, None) and text in output,
                      f"bad graph '{what}': canopy validate does not refuse it with "
                      f"'{text}': {output.strip()[:300]}")
        checks.expect(bool(schema_errors(graph, doc)),
                      f"bad graph '{what}': the schema accepts it")


def example_configs(src):
    """(name, document) of the repository's good node configs."""
    out = []
    for rel in ["runtime/dist/node.json"] + sorted(
            os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "examples/*/node.json.in"))):
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            text = f.read()
        # The examples' templates, as their run.sh fills them in.
        text = text.replace("@PORT@", "8080").replace("@HERE@", "/opt/example")
        out.append((rel, json.loads(text)))
    return out


def check_configs(checks, canopy, config, src):
    corpus = os.path.join(src, "tests/fuzz/corpus/config")
    good = example_configs(src) + GOOD_CONFIGS + GOOD_CONFIGS_SCHEMA_ONLY
    # The fuzz corpus's configs: good ones, and ones only canopy refuses.
    for name in ("spec.json", "ipv6.json", "shell_tool.json", "duplicate_key.json"):
        with open(os.path.join(corpus, name), encoding="utf-8") as f:
            good.append((f"tests/fuzz/corpus/config/{name}", json.load(f)))
    for what, doc in good:
        errors = schema_errors(config, doc)
        checks.expect(not errors, f"config {what}: the schema refuses it: {show(errors)}")
    # The good configs built here: a server starts with each.
    with open(os.path.join(canopy.tmp, "c.token"), "w", encoding="utf-8") as f:
        f.write("t-c\n")
    os.chmod(os.path.join(canopy.tmp, "c.token"), 0o600)
    env = dict(os.environ, CANOPY_B="t-b", OPENAI_API_KEY="k")
    for what, doc in GOOD_CONFIGS:
        doc = json.loads(json.dumps(doc))
        doc["home"] = os.path.join(canopy.tmp, "serve-home")
        doc["listen"] = "127.0.0.1:0"
        if "cluster" in doc:
            doc["cluster"]["listen"] = "127.0.0.1:0"
        rc, output = canopy.serve_accepts(canopy.write(doc), env)
        checks.expect(rc is None, f"config '{what}': canopy serve --config does not start "
                                  f"with it: {output.strip()[:300]}")
    # shell_tool.json: a reference in a shell's -c script; duplicate_key.json: two "users".
    for name, text in (("shell_tool.json", "shell"), ("duplicate_key.json", "duplicate key")):
        rc, output = canopy.serve(os.path.join(corpus, name))
        checks.expect(rc not in (0, None) and text in output,
                      f"config corpus {name}: canopy serve does not refuse it ({text})")
    bad = [(f"corpus {n}", None, json.load(open(os.path.join(corpus, n), encoding="utf-8")))
           for n in ("bad_tools.json", "bad_values.json")]
    bad += [(what, text, doc) for what, doc, text in BAD_CONFIGS]
    for what, text, doc in bad:
        path = canopy.write(doc)
        rc, output = canopy.serve(path)
        checks.expect(rc not in (0, None) and (text is None or text in output),
                      f"bad config '{what}': canopy serve --config does not refuse it"
                      f"{'' if text is None else ' with ' + repr(text)}: {output.strip()[:300]}")
        checks.expect(bool(schema_errors(config, doc)),
                      f"bad config '{what}': the schema accepts it")
    return len(good), len(bad)


def check_tools_files(checks, canopy, tools):
    for what, doc in GOOD_TOOLS_FILES:
        errors = schema_errors(tools, doc)
        checks.expect(not errors, f"tools file '{what}': the schema refuses it: {show(errors)}")
        path = canopy.write(doc)
        rc, output = canopy.worker(path)
        checks.expect(rc is None or (f"{path}: " not in output and "needs a secret" in output),
                      f"tools file '{what}': canopy worker refuses it: {output.strip()[:300]}")
    for what, doc, text in BAD_TOOLS_FILES:
        path = canopy.write(doc)
        rc, output = canopy.worker(path)
        checks.expect(rc not in (0, None) and text in output,
                      f"bad tools file '{what}': canopy worker --tools does not refuse it "
                      f"with {text!r}: {output.strip()[:300]}")
        checks.expect(bool(schema_errors(tools, doc)),
                      f"bad tools file '{what}': the schema accepts it")
    return len(GOOD_TOOLS_FILES), len(BAD_TOOLS_FILES)


def check_schema_key(checks, canopy, graph, config, tools):
    """A top-level "$schema" is for editors: every schema and canopy accept it."""
    key = {"$schema": "../runtime/schema/graph.schema.json"}
    doc = dict(key, steps={"a": {"fn": "noop"}})
    checks.expect(not schema_errors(graph, doc), "graph.schema.json refuses a \"$schema\" key")
    path = canopy.write(doc)
    rc, output = canopy.validate(path)
    checks.expect(rc == 0, f"\"$schema\": canopy validate refuses a graph with a \"$schema\" "
                           f"key: {output.strip()[:300]}")
    # A config and a tools file with "$schema" and one known error: canopy reports
    # that error only.
    doc = {"$schema": "config.schema.json", "max_parallel": 0}
    checks.expect(schema_errors(config, doc) and not schema_errors(config, {"$schema": "x"}),
                  "config.schema.json refuses a \"$schema\" key")
    rc, output = canopy.serve(canopy.write(doc))
    checks.expect("/max_parallel" in output and "$schema" not in output,
                  f"\"$schema\": canopy serve --config refuses a \"$schema\" key: "
                  f"{output.strip()[:300]}")
    doc = {"$schema": "tools.schema.json", "tools": {"t": {"argv": []}}}
    checks.expect(not schema_errors(tools, {"$schema": "x", "tools": {}}),
                  "tools.schema.json refuses a \"$schema\" key")
    rc, output = canopy.worker(canopy.write(doc))
    checks.expect("/tools/t/argv" in output and "$schema" not in output,
                  f"\"$schema\": canopy worker --tools refuses a \"$schema\" key: "
                  f"{output.strip()[:300]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canopy", required=True, help="the canopy binary")
    parser.add_argument("--source-dir", required=True, help="the repository's top folder")
    args = parser.parse_args()
    src = os.path.abspath(args.source_dir)
    checks = Checks()
    schemas = os.path.join(src, "runtime/schema")
    graph = load_schema(checks, os.path.join(schemas, "graph.schema.json"))
    config = load_schema(checks, os.path.join(schemas, "config.schema.json"))
    tools = load_schema(checks, os.path.join(schemas, "tools.schema.json"))
    with tempfile.TemporaryDirectory(prefix="canopy-schema-") as tmp:
        canopy = Canopy(os.path.abspath(args.canopy), tmp)
        accepted, outside, embedded = check_graphs(checks, canopy, graph, src)
        check_invalid_fixtures(checks, canopy, graph, src)
        good_configs, bad_configs = check_configs(checks, canopy, config, src)
        good_tools, bad_tools = check_tools_files(checks, canopy, tools)
        check_schema_key(checks, canopy, graph, config, tools)
    print(f"{checks.count} checks; graphs: {accepted} files canopy validate accepts, "
          f"{outside} it refuses only for tools or files outside them, {embedded} from the "
          f"C++ tests, {len(STRUCTURAL)} structural and {len(SEMANTIC)} semantic invalid "
          f"fixtures, {len(BAD_GRAPHS)} bad graphs built here; configs: {good_configs} good, "
          f"{bad_configs} bad; tools files: {good_tools} good, {bad_tools} bad")
    for f in checks.failures:
        print(f"FAIL: {f}")
    if checks.failures:
        print(f"{len(checks.failures)} of {checks.count} checks failed")
        return 1
    print("ok")
    return 0

if __name__ == "__main__":
    sys.exit(main())
