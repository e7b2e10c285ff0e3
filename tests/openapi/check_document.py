#!/usr/bin/python3
"""Checks canopy's OpenAPI document.

    /usr/bin/python3 check_document.py OPENAPI_JSON

1. The document against the OpenAPI 3.1 meta-schema (openapi-3.1.schema.json
   next to this script), with JSON Schema 2020-12.
2. Every schema (components/schemas and every inline `schema` of a
   parameter, header or media type) against the JSON Schema 2020-12
   meta-schema (Draft202012Validator.check_schema).
3. Every `$ref` resolves inside the document (no network, no other file).
4. Every operation has at least one response and an operationId unique in
   the document; every `{name}` of a path template is a declared path
   parameter and every declared path parameter is in the template.

Exit 0 with a one-line summary; exit 1 with each problem on a line of its
own, named by its JSON pointer into the document. Needs Debian's
python3-jsonschema (4.10): run it with /usr/bin/python3.
"""

import json
import os
import re
import sys

import jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match

HERE = os.path.dirname(os.path.abspath(__file__))
META_SCHEMA = os.path.join(HERE, "openapi-3.1.schema.json")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def pointer(parts):
    """A JSON pointer of `parts` (keys and indexes)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts) or "/"


def one_line(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def no_network(uri):
    raise jsonschema.RefResolutionError("not resolved offline: " + uri)


def resolve_local(doc, ref):
    """The value `ref` (`#/a/b`) points to in `doc`, or raises KeyError."""
    if not ref.startswith("#"):
        raise KeyError("not a reference inside the document")
    frag = ref[1:]
    if frag == "":
        return doc
    if not frag.startswith("/"):
        raise KeyError("not a JSON pointer")
    node = doc
    for raw in frag[1:].split("/"):
        key = raw.replace("~1", "/").replace("~0", "~")
        key = re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), key)
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise KeyError(key)
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise KeyError(key)
    return node


def walk_refs(node, parts, out):
    """Every `$ref` string under `node`, with its pointer."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                out.append((parts + [k], v))
            else:
                walk_refs(v, parts + [k], out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            walk_refs(v, parts + [i], out)


def inline_schemas(doc):
    """(pointer parts, schema) of every schema outside components/schemas:
    the `schema` of parameters, headers and media types."""
    found = []

    def visit(node, parts):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "schema" and isinstance(v, (dict, bool)):
                    found.append((parts + [k], v))
                elif not (parts == ["components"] and k == "schemas"):
                    visit(v, parts + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                visit(v, parts + [i])

    visit(doc, [])
    return found


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: check_document.py OPENAPI_JSON\n")
        return 2
    problems = []
    try:
        with open(argv[1], encoding="utf-8") as f:
            doc = json.load(f)
        with open(META_SCHEMA, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        print("error: " + one_line(e))
        return 1

    # 1. the OpenAPI meta-schema (it refers to itself only: `$dynamicRef: #meta`)
    resolver = jsonschema.RefResolver.from_schema(
        meta, handlers={"http": no_network, "https": no_network})
    found = []
    for err in Draft202012Validator(meta, resolver=resolver).iter_errors(doc):
        detail = best_match(err.context) if err.context else err
        found.append((list(detail.absolute_path), detail.validator, detail.message))
    for parts, keyword, message in sorted(found, key=lambda x: list(map(str, x[0]))):
        # A property that failed its own schema is also "unevaluated" in every
        # object above it: report the failure, not its echoes.
        if keyword == "unevaluatedProperties" and any(
                len(other) > len(parts) and other[:len(parts)] == parts
                for other, _, _ in found):
            continue
        problems.append("%s: %s" % (pointer(parts), one_line(message)))
    if not isinstance(doc, dict):
        for p in problems:
            print("error: " + p)
        return 1

    # 2. every schema is a JSON Schema 2020-12 schema
    schemas = doc.get("components", {}).get("schemas", {})
    checked = [(["components", "schemas", name], s) for name, s in schemas.items()]
    checked += inline_schemas(doc)
    for parts, schema in checked:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as e:
            problems.append("%s: invalid schema: %s" % (
                pointer(parts + list(e.absolute_path)), one_line(e.message)))

    # 3. every $ref resolves
    refs = []
    walk_refs(doc, [], refs)
    for parts, ref in refs:
        try:
            resolve_local(doc, ref)
        except KeyError as e:
            problems.append("%s: $ref %s does not resolve (%s)" % (pointer(parts), ref,
                                                                   one_line(e)))

    # 4. operations
    seen_ids = {}
    operations = 0
    for template, item in doc.get("paths", {}).items():
        if not isinstance(item, dict):
            continue
        names = re.findall(r"\{([^}/]+)\}", template)
        shared = item.get("parameters", [])
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            operations += 1
            where = ["paths", template, method]
            op_id = op.get("operationId")
            if not isinstance(op_id, str) or not op_id:
                problems.append("%s: no operationId" % pointer(where))
            elif op_id in seen_ids:
                problems.append("%s: operationId %r is also at %s" % (
                    pointer(where + ["operationId"]), op_id, seen_ids[op_id]))
            else:
                seen_ids[op_id] = pointer(where + ["operationId"])
            responses = op.get("responses")
            if not isinstance(responses, dict) or not responses:
                problems.append("%s: no response" % pointer(where + ["responses"]))
            declared = set()
            for i, p in enumerate(list(shared) + list(op.get("parameters", []))):
                try:
                    p = resolve_local(doc, p["$ref"]) if "$ref" in p else p
                except (KeyError, TypeError):
                    continue  # reported with the $refs
                if isinstance(p, dict) and p.get("in") == "path":
                    declared.add(p.get("name"))
            for n in names:
                if n not in declared:
                    problems.append("%s: path parameter {%s} is not declared" % (
                        pointer(where), n))
            for n in sorted(x for x in declared if x not in names):
                problems.append("%s: path parameter %r is not in the template" % (
                    pointer(where), n))

    if problems:
        for p in problems:
            print("error: " + p)
        return 1
    print("ok: %s: OpenAPI %s, %d paths, %d operations, %d component schemas, "
          "%d inline schemas, %d $refs" % (argv[1], doc.get("openapi"),
                                           len(doc.get("paths", {})), operations,
                                           len(schemas), len(checked) - len(schemas),
                                           len(refs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
