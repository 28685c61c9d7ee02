"""A scriptable MCP server over stdio, standard library only: the fixture of
tests/stdio*.rs (the real SDKs' servers are in tests/peers/).

    python3 stdio_server.py [--era legacy|modern|both] [--probe error|silent]
        [--tools N] [--ignore-eof] [--ignore-term] [--grandchild]
        [--stderr-flood BYTES] [--crash-at-start] [--exit-after-init]
        [--noise] [--no-read-after-init] [--wrap] [--daemons]
        [--start-delay SECONDS]

- era: `legacy` answers `initialize` only (2025-11-25 and older); `modern`
  answers `server/discover` and every request with `_meta` only
  (2026-07-28); `both` does both.
- probe: what a legacy server does with a request before `initialize`:
  answer a JSON-RPC error (-32600), or say nothing; `silent` also makes
  a server of 2026-07-28 (`modern`, `both`) leave its first
  `server/discover` unanswered.
- ignore-eof: keeps running when stdin closes; ignore-term: SIGTERM is
  ignored (so only SIGKILL ends it).
- grandchild: starts `sleep 1000` as a child of its own (a wrapper's
  grandchild, as `npx` leaves).
- daemons: starts two processes that leave its group: `sleep 1001` in a
  session of its own (`setsid`), and `sleep 1002` double-forked by a
  `setsid` shell that exits at once (a daemon, reparented away from us).
- wrap: runs this same script (without --wrap) as a child, and waits for
  it, forwarding no signal: the shape of `npx -y` and `uvx`.
- start-delay: sleeps that long before it reads its stdin (a server slow to
  start: imports, a busy machine); what the client wrote waits in the pipe.

Tools: `echo` (text), `env` (the value of the variable `name`, or null),
`slow` (answers after `seconds`; progress every 0.1 s when asked),
`cancelled` (the ids of the requests cancelled so far), `notified` (the
methods of the client's notifications so far), `capabilities` (what the
client declared: in `initialize`, or in this request's `_meta`), `big` (a text of
`bytes` bytes), `roots` (asks the client `roots/list`, 2025 only, and
answers with what it said), `ask` (asks the client the request
`method` with `params`, and answers with its result as JSON: a server
request in 2025, an input request in 2026-07-28), `crash` (exits 3 at once), `pid` (its process
id), `change` (one more tool, and `notifications/tools/list_changed`: in
2026-07-28 on the client's `subscriptions/listen`), `close_stdout`
(closes its stdout and lives on), `bad_utf8` (writes a line that is not
UTF-8). With `--log FILE`, each `tools/call` appends `call NAME` to FILE,
and each `server/discover` and `initialize` its method.

Logging: once asked for a level (`logging/setLevel` in 2025, the request's
`_meta` `io.modelcontextprotocol/logLevel` in 2026-07-28), each
`tools/call` sends a `notifications/message` before its answer; never
unasked.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

MODERN = "2026-07-28"
LEGACY = ["2025-11-25", "2025-06-18", "2025-03-26"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--era", default="both", choices=["legacy", "modern", "both"])
    p.add_argument("--probe", default="error", choices=["error", "silent"])
    p.add_argument("--tools", type=int, default=3)
    p.add_argument("--ignore-eof", action="store_true")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--grandchild", action="store_true")
    p.add_argument("--stderr-flood", type=int, default=0)
    p.add_argument("--crash-at-start", action="store_true")
    p.add_argument("--exit-after-init", action="store_true")
    p.add_argument("--noise", action="store_true")
    # Stops reading its stdin after the first tools/list (the end of a
    # client's discovery).
    p.add_argument("--no-read-after-init", action="store_true")
    p.add_argument("--wrap", action="store_true")
    p.add_argument("--daemons", action="store_true")
    p.add_argument("--log")
    p.add_argument("--start-delay", type=float, default=0)
    args, _ = p.parse_known_args()

    if args.wrap:
        argv = [a for a in sys.argv[1:] if a != "--wrap"]
        child = subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__)] + argv)
        # No signal is forwarded: a SIGTERM to this process alone leaves the
        # child running, as npx and uvx do.
        sys.exit(child.wait())

    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.grandchild:
        subprocess.Popen(["sleep", "1000"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if args.daemons:
        quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
        subprocess.Popen(["sleep", "1001"], start_new_session=True, **quiet)
        subprocess.run(["sh", "-c", "sleep 1002 &"], start_new_session=True, **quiet)
    if args.crash_at_start:
        sys.stderr.write("starting up\nfatal: bad config (no API key)\n")
        sys.stderr.flush()
        sys.exit(1)
    if args.stderr_flood:
        line = "x" * 99 + "\n"
        for _ in range(args.stderr_flood // 100):
            sys.stderr.write(line)
        sys.stderr.flush()
    if args.noise:
        out("this is a log line, not JSON-RPC")
        out('{"level": "info", "msg": "a JSON log line"}')
    if args.start_delay:
        time.sleep(args.start_delay)

    Server(args).run()


lock = threading.Lock()


def out(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def send(message):
    out(json.dumps(message, separators=(",", ":")))


class Server:
    def __init__(self, args):
        self.args = args
        self.initialized = False
        self.cancelled = []
        self.waiting = {}  # id of our request to the client -> event, answer
        self.next_id = 0
        self.subscription = None  # the id of a subscriptions/listen, 2026
        self.extra_tools = 0
        self.dropped_probe = False
        self.client_capabilities = None  # from initialize (2025)
        self.log_level = None  # set by logging/setLevel (2025)
        self.notified = []  # the methods of the client's notifications

    def run(self):
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                send({"jsonrpc": "2.0", "id": None,
                      "error": {"code": -32700, "message": "Parse error"}})
                continue
            if "method" not in msg:
                self.on_response(msg)
                continue
            if "id" not in msg:
                self.on_notification(msg)
                continue
            threading.Thread(target=self.on_request, args=(msg,), daemon=True).start()
            if msg["method"] == "tools/list" and self.args.no_read_after_init:
                # Stops reading its stdin for good.
                while True:
                    time.sleep(1000)
        if self.args.ignore_eof:
            while True:
                time.sleep(1000)
        sys.stderr.write("stdin closed; exiting\n")
        sys.stderr.flush()

    def on_response(self, msg):
        waiting = self.waiting.pop(msg.get("id"), None)
        if waiting:
            waiting[1].append(msg)
            waiting[0].set()

    def on_notification(self, msg):
        self.notified.append(msg["method"])
        if msg["method"] == "notifications/cancelled":
            self.cancelled.append(msg.get("params", {}).get("requestId"))

    def modern(self, msg):
        meta = (msg.get("params") or {}).get("_meta") or {}
        return meta.get("io.modelcontextprotocol/protocolVersion") == MODERN

    def on_request(self, msg):
        rid, method = msg["id"], msg["method"]
        params = msg.get("params") or {}
        era = self.args.era
        if self.args.log and method in ("server/discover", "initialize"):
            with open(self.args.log, "a") as log:
                log.write("%s\n" % method)
        if self.modern(msg):
            if era == "legacy":
                return self.before_initialize(rid)
            return self.answer_modern(rid, method, params)
        if method != "initialize" and not self.initialized:
            return self.before_initialize(rid)
        if method == "initialize":
            if era == "modern":
                return self.error(rid, -32022, "Unsupported protocol version",
                                  {"supported": [MODERN], "requested": params.get("protocolVersion")})
            proposed = params.get("protocolVersion")
            version = proposed if proposed in LEGACY else LEGACY[0]
            self.initialized = True
            self.client_capabilities = params.get("capabilities")
            self.result(rid, {"protocolVersion": version,
                              "capabilities": {"tools": {"listChanged": True}, "logging": {}},
                              "serverInfo": {"name": "stdio-fixture", "version": "1.0"}})
            if self.args.exit_after_init:
                sys.stderr.write("initialized; now failing on purpose\n")
                sys.stderr.flush()
                os._exit(1)
            return
        self.answer_common(rid, method, params, False)

    def before_initialize(self, rid):
        if self.args.probe == "error":
            self.error(rid, -32600, "Received request before initialization was complete")

    def answer_modern(self, rid, method, params):
        if method == "subscriptions/listen":
            # Answered only when it ends: here, never.
            self.subscription = rid
            return send({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                         "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": rid},
                                    "notifications": params.get("notifications")}})
        if method == "server/discover":
            if self.args.probe == "silent" and not self.dropped_probe:
                self.dropped_probe = True
                return
            return self.result(rid, {"supportedVersions": [MODERN],
                                     "capabilities": {"tools": {"listChanged": True},
                                                      "logging": {}},
                                     "ttlMs": 0, "cacheScope": "public",
                                     "resultType": "complete",
                                     "_meta": {"io.modelcontextprotocol/serverInfo":
                                               {"name": "stdio-fixture", "version": "1.0"}}})
        self.answer_common(rid, method, params, True)

    def answer_common(self, rid, method, params, modern):
        if method == "ping":
            return self.result(rid, {})
        if method == "logging/setLevel" and not modern:
            self.log_level = params.get("level")
            return self.result(rid, {})
        # The level asked for: set once (2025), or with this request (2026).
        level = self.log_level
        if modern:
            level = (params.get("_meta") or {}).get("io.modelcontextprotocol/logLevel")
        if method == "tools/list":
            tools = [{"name": n, "inputSchema": {"type": "object"}} for n in
                     ["echo", "env", "slow", "cancelled", "notified", "capabilities", "big", "roots", "ask", "crash", "pid", "change", "close_stdout", "bad_utf8"]]
            tools += [{"name": "tool-%03d" % i, "inputSchema": {"type": "object"}}
                      for i in range(self.args.tools + self.extra_tools)]
            return self.result(rid, {"tools": tools}, modern)
        if method != "tools/call":
            return self.error(rid, -32601, "Method not found: " + method)
        name = params.get("name")
        a = params.get("arguments") or {}
        if self.args.log:
            with open(self.args.log, "a") as log:
                log.write("call %s\n" % name)
        if level is not None:
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "logger": "fixture",
                             "data": "calling %s (asked: %s)" % (name, level)}})
        if name == "echo":
            text = a.get("text", "")
        elif name == "env":
            text = os.environ.get(a.get("name", ""))
        elif name == "slow":
            token = (params.get("_meta") or {}).get("progressToken")
            end = time.time() + float(a.get("seconds", 1))
            step = 0
            while time.time() < end:
                if rid in self.cancelled:
                    return
                time.sleep(0.1)
                step += 1
                if token is not None:
                    send({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": step}})
            text = "slept"
        elif name == "cancelled":
            text = json.dumps(self.cancelled)
        elif name == "capabilities":
            if modern:
                meta = params.get("_meta") or {}
                text = json.dumps(meta.get("io.modelcontextprotocol/clientCapabilities"))
            else:
                text = json.dumps(self.client_capabilities)
        elif name == "notified":
            text = json.dumps(self.notified)
        elif name == "big":
            text = "x" * int(a.get("bytes", 0))
        elif name == "roots":
            self.next_id += 1
            qid = "s%d" % self.next_id
            event, answer = threading.Event(), []
            self.waiting[qid] = (event, answer)
            send({"jsonrpc": "2.0", "id": qid, "method": "roots/list"})
            event.wait(10)
            text = json.dumps(answer[0].get("result") if answer else None)
        elif name == "ask":
            if modern:
                given = params.get("inputResponses") or {}
                if "ask" not in given:
                    return self.result(rid, {
                        "resultType": "input_required",
                        "inputRequests": {"ask": {"method": a.get("method"),
                                                  "params": a.get("params", {})}},
                        "requestState": "asked"})
                text = json.dumps(given["ask"])
            else:
                self.next_id += 1
                qid = "s%d" % self.next_id
                event, answer = threading.Event(), []
                self.waiting[qid] = (event, answer)
                send({"jsonrpc": "2.0", "id": qid, "method": a.get("method"),
                      "params": a.get("params", {})})
                event.wait(10)
                got = answer[0] if answer else {}
                text = json.dumps(got.get("result", {"error": got.get("error")}))
        elif name == "change":
            # One more tool, and the notice: over a subscription in 2026.
            self.extra_tools += 1
            notice = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            if modern and self.subscription is not None:
                notice["params"] = {"_meta": {"io.modelcontextprotocol/subscriptionId":
                                              self.subscription}}
            if modern and self.subscription is None:
                text = "no subscription"
            else:
                send(notice)
                text = "changed"
        elif name == "close_stdout":
            # Closes its stdout and lives on (until stdin's end).
            with lock:
                sys.stdout.flush()
                os.close(1)
            return
        elif name == "bad_utf8":
            with lock:
                sys.stdout.buffer.write(b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\xff\xfe"}}\n')
                sys.stdout.flush()
            return
        elif name == "pid":
            text = str(os.getpid())
        elif name == "crash":
            sys.stderr.write("crashing on purpose\n")
            sys.stderr.flush()
            os._exit(3)
        elif name and name.startswith("tool-"):
            text = name
        else:
            return self.error(rid, -32602, "Unknown tool: %s" % name)
        self.result(rid, {"content": [{"type": "text", "text": text}]}, modern)

    def result(self, rid, result, modern=False):
        if modern:
            result = dict(result, resultType="complete")
        send({"jsonrpc": "2.0", "id": rid, "result": result})

    def error(self, rid, code, message, data=None):
        error = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        send({"jsonrpc": "2.0", "id": rid, "error": error})


if __name__ == "__main__":
    main()
