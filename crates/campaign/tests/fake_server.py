#!/usr/bin/env python3
"""A fake serving engine for the campaign's failure tests: each mode fails one way.

usage: fake_server.py --port PORT --mode MODE
  oom              prints a CUDA out-of-memory traceback line and exits 1 while "loading"
  never_ready      keeps "loading" forever: never listens
  port_in_use      binds the port twice, so the second bind fails with EADDRINUSE, and exits 1
  crash_mid_bench  serves /health and /v1/completions, then kills itself with SIGKILL on the
                   fourth completion (the readiness check is the first)
  never_generates  answers /health and /v1/models, but never answers a completion
"""
import argparse
import json
import os
import signal
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMPLETIONS = 0
MODE = ""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("fake_server: " + (fmt % args) + "\n")

    def reply(self, status, body, ctype="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, "{}")
        elif self.path == "/v1/models":
            self.reply(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}))
        else:
            self.reply(404, "{}")

    def do_POST(self):
        global COMPLETIONS
        if MODE == "never_generates":
            while True:
                time.sleep(1)
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        COMPLETIONS += 1
        if COMPLETIONS >= 4:
            sys.stderr.write("fake_server: crashing now\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        usage = {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}
        if req.get("stream"):
            chunks = [json.dumps({"choices": [{"index": 0, "text": "a", "finish_reason": None}]}),
                      json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": usage}),
                      "[DONE]"]
            self.reply(200, "".join(f"data: {c}\n\n" for c in chunks), "text/event-stream")
        else:
            self.reply(200, json.dumps({"choices": [{"index": 0, "text": "a", "finish_reason": "length"}], "usage": usage}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", required=True)
    a = ap.parse_args()
    global MODE
    MODE = a.mode
    print(f"fake_server: loading weights (mode {a.mode})", flush=True)
    if a.mode == "oom":
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 95.00 GiB total capacity)", file=sys.stderr, flush=True)
        sys.exit(1)
    if a.mode == "never_ready":
        while True:
            time.sleep(1)
    if a.mode == "port_in_use":
        first = socket.socket()
        first.bind(("127.0.0.1", a.port))
        first.listen()
        try:
            second = socket.socket()
            second.bind(("127.0.0.1", a.port))
        except OSError as e:
            print(f"ERROR: {e}", file=sys.stderr, flush=True)
            sys.exit(1)
    ThreadingHTTPServer(("127.0.0.1", a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
