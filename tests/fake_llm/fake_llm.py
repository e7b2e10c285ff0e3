#!/usr/bin/python3
"""fake_llm.py: an OpenAI-compatible chat completions server that plays a script.

A protocol double of a model provider for canopy's tests: `POST
/v1/chat/completions`, streaming (SSE chunks, `data: [DONE]`) and not,
`tools`/`tool_calls`, `usage`, errors with `Retry-After`. Each request takes
the next reply of the script, in order (a reply may instead be chosen by a
`match` on the last message's text). Everything it receives, and when a
client went away before its reply ended, is appended to a JSON Lines log.

    fake_llm.py --script SCRIPT.json --log LOG.jsonl --port-file PORT

A reply (every key optional):

    {"match": "text in the last message",     choose this reply for such a request
     "status": 200, "error": "message",       a non-200 answer (OpenAI error body)
     "retry_after": 2,                        the Retry-After header (seconds)
     "content": "text", "tool_calls": [{"id": "c1", "name": "search", "arguments": {...}}],
     "finish_reason": "stop",                 default: tool_calls when there are some
     "usage": {"prompt_tokens": 12, "completion_tokens": 5},
     "delay_ms": 0,                           before the answer's headers
     "chunks": 4, "chunk_delay_ms": 0,        the content streamed in this many pieces
     "disconnect_after_chunks": 2}            the server hangs up mid-stream

Log lines: {"event": "request", "n", "at_ms", "path", "authorization", "body"},
{"event": "answered", "n", "at_ms", "status"}, {"event": "disconnected", "n",
"at_ms"} (the client closed the connection before the answer ended; seen
within 10 ms), and {"event": "hung_up", "n", "at_ms"} for a scripted hang-up.
"""

import argparse
import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"replies": [], "next": 0, "n": 0, "log": None}


def now_ms():
    return int(time.time() * 1000)


def log(entry):
    with LOCK:
        with open(STATE["log"], "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")


def take_reply(body):
    """The reply for `body`: the first unused one whose `match` is in the last message, else the next in order."""
    messages = body.get("messages") or []
    last = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else ""
    last = last if isinstance(last, str) else json.dumps(last)
    with LOCK:
        STATE["n"] += 1
        n = STATE["n"]
        replies = STATE["replies"]
        for i, r in enumerate(replies):
            if r.get("used") or "match" not in r:
                continue
            if r["match"] in last:
                r["used"] = True
                return n, r
        for i, r in enumerate(replies):
            if not r.get("used") and "match" not in r:
                r["used"] = True
                return n, r
    return n, {"status": 500, "error": "the script has no reply left"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def closed(self):
        """True when the client has closed its end (EOF readable)."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def pause(self, ms, n):
        """Sleeps `ms`, watching for the client's disconnect. @returns False when it left."""
        end = time.monotonic() + ms / 1000.0
        while time.monotonic() < end:
            if self.closed():
                log({"event": "disconnected", "n": n, "at_ms": now_ms()})
                return False
            time.sleep(0.005)
        return True

    def send_json(self, status, doc, extra=None):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/chat/completions":
            return self.send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
        try:
            body = json.loads(raw)
        except ValueError:
            return self.send_json(400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
        n, r = take_reply(body)
        log({"event": "request", "n": n, "at_ms": now_ms(), "path": self.path,
             "authorization": self.headers.get("Authorization"), "body": body})
        if not self.pause(r.get("delay_ms", 0), n):
            return
        status = r.get("status", 200)
        if status != 200:
            extra = {"Retry-After": str(r["retry_after"])} if "retry_after" in r else {}
            self.send_json(status, {"error": {"message": r.get("error", "error"), "type": "server_error"}}, extra)
            log({"event": "answered", "n": n, "at_ms": now_ms(), "status": status})
            return
        if body.get("stream"):
            self.stream(n, r, body)
        else:
            self.send_json(200, completion(r, body))
            log({"event": "answered", "n": n, "at_ms": now_ms(), "status": 200})

    def stream(self, n, r, body):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        content = r.get("content", "")
        pieces = max(1, int(r.get("chunks", 1)))
        size = max(1, -(-len(content) // pieces)) if content else 1
        parts = [content[i:i + size] for i in range(0, len(content), size)] if content else []
        sent = 0

        def send(doc):
            self.wfile.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
            self.wfile.flush()

        try:
            send(chunk({"role": "assistant"}, None))
            for part in parts:
                if sent and not self.pause(r.get("chunk_delay_ms", 0), n):
                    return
                if "disconnect_after_chunks" in r and sent >= r["disconnect_after_chunks"]:
                    log({"event": "hung_up", "n": n, "at_ms": now_ms()})
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                send(chunk({"content": part}, None))
                sent += 1
            for i, call in enumerate(r.get("tool_calls", [])):
                send(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                            "function": {"name": call["name"],
                                                         "arguments": json.dumps(call.get("arguments", {}))}}]}, None))
            send(chunk({}, finish_reason(r)))
            if (body.get("stream_options") or {}).get("include_usage"):
                send({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
                      "choices": [], "usage": usage(r, body)})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            log({"event": "answered", "n": n, "at_ms": now_ms(), "status": 200})
        except (BrokenPipeError, ConnectionResetError):
            log({"event": "disconnected", "n": n, "at_ms": now_ms()})


def finish_reason(r):
    return r.get("finish_reason", "tool_calls" if r.get("tool_calls") else "stop")


def usage(r, body):
    if "usage" in r:
        u = dict(r["usage"])
    else:
        prompt = sum(len(json.dumps(m)) for m in body.get("messages", [])) // 4
        u = {"prompt_tokens": prompt, "completion_tokens": max(1, len(r.get("content", "")) // 4)}
    u["total_tokens"] = u["prompt_tokens"] + u["completion_tokens"]
    return u


def chunk(delta, finish):
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def completion(r, body):
    message = {"role": "assistant", "content": r.get("content", "") if not r.get("tool_calls") or r.get("content") else None}
    if r.get("tool_calls"):
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
                                 for c in r["tool_calls"]]
    return {"id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(r)}],
            "usage": usage(r, body)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", required=True, help="JSON file: {\"replies\": [...]}")
    ap.add_argument("--log", required=True, help="JSON Lines file the requests are appended to")
    ap.add_argument("--port-file", required=True, help="where the bound port is written once listening")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    with open(a.script, encoding="utf-8") as f:
        STATE["replies"] = json.load(f)["replies"]
    STATE["log"] = a.log
    open(a.log, "a").close()
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(tmp, a.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
