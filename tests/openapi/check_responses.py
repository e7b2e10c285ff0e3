#!/usr/bin/python3
"""Checks HTTP answers against canopy's OpenAPI document, as a co-process.

    /usr/bin/python3 check_responses.py OPENAPI_JSON

Reads one JSON object per line on stdin:

    {"method": "GET", "path": "/v1/executions/abc?x=1", "status": 200,
     "content_type": "application/json", "body": <parsed JSON or null>,
     "text": "<raw body, only when body is null>"}

and writes exactly one line per request on stdout: `ok`, or
`error: <what does not match, with its JSON path>`. Exits when stdin closes.

The answer's status must be one of its operation's responses; its content
type one of that response's media types (parameters such as `; version=`
ignored); a JSON body must validate against the media type's schema; a
response without content (204) must have no body. HEAD is checked as GET
without a body. Answers the server gives whatever the route (table
GENERIC below) need no operation, but must carry an `Error` body with the
listed code.
"""

import json
import sys

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

#: Answers given before or outside any route's handler: status → the error
#: codes it may carry. `route` says when it applies: "unknown" (no path
#: template matches), "method" (a template matches, not the method) or "any".
GENERIC = {
    404: ("unknown", {"not_found"}),            # no route
    405: ("method", {"method_not_allowed"}),    # the path exists, the method does not
    400: ("any", {"bad_request"}),              # malformed HTTP, missed deadline (httplib)
    413: ("any", {"too_large"}),                # body over max_request_bytes (httplib)
    414: ("any", {"uri_too_long"}),             # request line over 8 KiB
    500: ("any", {"internal"}),                 # an exception in a handler
    503: ("any", {"too_many_connections"}),     # over the per-address connection cap
}

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ERROR_SCHEMA = {"$ref": "#/components/schemas/Error"}


def one_line(text, limit=500):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def pointer(parts):
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts) or "/"


def media_type(value):
    return (value or "").split(";", 1)[0].strip().lower()


def is_json(mt):
    return mt == "application/json" or mt.endswith("+json")


def no_network(uri):
    raise jsonschema.RefResolutionError("not resolved offline: " + uri)


class Checker:
    def __init__(self, doc):
        self.doc = doc
        self.resolver = jsonschema.RefResolver.from_schema(
            doc, handlers={"http": no_network, "https": no_network})
        self.validators = {}
        # (segments, template, path item): templates with more literal
        # segments first, so `/a/b` wins over `/a/{x}`.
        self.templates = []
        for template, item in doc.get("paths", {}).items():
            # Exact, as the server's routes: `/ui/` is not `/ui`.
            segs = template[1:].split("/")
            self.templates.append((segs, template, item))
        self.templates.sort(key=lambda t: -sum(1 for s in t[0] if not s.startswith("{")))
        self.error_validator = self.validator(ERROR_SCHEMA)
        # Compile every response's validator now, not at its first answer.
        for _, _, item in self.templates:
            for method in METHODS:
                for response in (item.get(method) or {}).get("responses", {}).values():
                    for media in self.resolve(response).get("content", {}).values():
                        if "schema" in media:
                            self.validator(media["schema"])

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            _, node = self.resolver.resolve(node["$ref"])
        return node

    def validator(self, schema):
        """The compiled validator of `schema`, an object of the document
        (cached by identity; the document lives as long as the checker)."""
        entry = self.validators.get(id(schema))
        if entry is None:
            entry = (Draft202012Validator(schema, resolver=self.resolver), schema)
            self.validators[id(schema)] = entry
        return entry[0]

    def match(self, path):
        segs = path[1:].split("/")
        for tsegs, template, item in self.templates:
            if len(tsegs) != len(segs):
                continue
            if all((t.startswith("{") and t.endswith("}") and s != "") or t == s
                   for t, s in zip(tsegs, segs)):
                return template, item
        return None, None

    def check(self, req):
        method = str(req.get("method", "")).upper()
        raw_path = str(req.get("path", ""))
        path = raw_path.split("?", 1)[0].split("#", 1)[0]
        status = req.get("status")
        if not isinstance(status, int):
            return "error: request has no integer status"
        body = req.get("body")
        text = req.get("text")
        ctype = media_type(req.get("content_type"))
        head = method == "HEAD"
        template, item = self.match(path)
        op = None
        if item is not None:
            op = item.get("head" if head and "head" in item else
                          "get" if head else method.lower())
        where = "%s %s" % (method, template or path)

        response = None
        if op is not None:
            response = op.get("responses", {}).get(str(status))
            if response is None:
                response = op.get("responses", {}).get("%dXX" % (status // 100))
            if response is None:
                response = op.get("responses", {}).get("default")
        if response is None:
            generic = GENERIC.get(status)
            scope = "unknown" if item is None else "method" if op is None else "op"
            if generic is None or generic[0] not in ("any", scope):
                if op is None:
                    return "error: no operation for %s %s" % (method, path)
                return "error: %s has no answer %d" % (where, status)
            if head:
                return self.check_body(where, status, {}, ctype, body, text, head)
            return self.check_error_body(where, status, ctype, body, text, generic[1])
        return self.check_body(where, status, self.resolve(response), ctype, body, text,
                               head)

    def check_error_body(self, where, status, ctype, body, text, codes):
        if ctype != "application/json":
            return "error: %s %d: content type %r is not application/json" % (
                where, status, ctype)
        body, err = self.json_body(where, status, body, text)
        if err:
            return err
        problem = self.first_problem(self.error_validator, body)
        if problem:
            return "error: %s %d: %s" % (where, status, problem)
        code = body["error"]["code"]
        if code not in codes:
            return "error: %s %d: /error/code: %r is not one of %s" % (
                where, status, code, ", ".join(sorted(codes)))
        return "ok"

    def check_body(self, where, status, response, ctype, body, text, head):
        content = response.get("content") or {}
        has_body = body is not None or bool(text)
        if not content or status == 204 or head:
            if has_body:
                return "error: %s %d: expected no body, got %s" % (
                    where, status, one_line(text if text else json.dumps(body), 80))
            return "ok"
        media = content.get(ctype)
        if media is None:
            for key, value in content.items():
                k = media_type(key)
                if k == "*/*" or (k.endswith("/*") and ctype.startswith(k[:-1])):
                    media = value
                    break
        if media is None:
            return "error: %s %d: content type %r is not one of %s" % (
                where, status, ctype, ", ".join(sorted(content)))
        if not is_json(ctype) or "schema" not in media:
            return "ok"
        body, err = self.json_body(where, status, body, text)
        if err:
            return err
        problem = self.first_problem(self.validator(media["schema"]), body)
        if problem:
            return "error: %s %d: %s" % (where, status, problem)
        return "ok"

    @staticmethod
    def json_body(where, status, body, text):
        if body is not None:
            return body, None
        if not text:
            return None, "error: %s %d: empty body, expected JSON" % (where, status)
        try:
            return json.loads(text), None
        except ValueError:
            return None, "error: %s %d: body is not JSON: %s" % (where, status,
                                                                  one_line(text, 80))

    @staticmethod
    def first_problem(validator, instance):
        err = best_match(validator.iter_errors(instance))
        if err is None:
            return None
        # The deepest cause of an anyOf/oneOf/allOf failure names the field.
        while err.context:
            deeper = best_match(err.context)
            if deeper is None:
                break
            err = deeper
        return "%s: %s" % (pointer(list(err.absolute_path)), one_line(err.message, 300))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: check_responses.py OPENAPI_JSON\n")
        return 2
    with open(argv[1], encoding="utf-8") as f:
        checker = Checker(json.load(f))
    out = sys.stdout
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            answer = checker.check(req) if isinstance(req, dict) else \
                "error: a request line must be a JSON object"
        except Exception as e:  # one bad line must not end the co-process
            answer = "error: cannot check: %s" % one_line(repr(e), 300)
        out.write(answer.replace("\n", " ").replace("\r", " ") + "\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
