// Preloaded into server-everything (`node --require loopback.cjs ...`):
// 1. every `listen` on a TCP port binds 127.0.0.1, never all interfaces;
// 2. every HTTP exchange is printed as `SEEN <METHOD> <path> <status>`, so
//    that tests/interop.rs can check what the server saw (the DELETE).
"use strict";
const net = require("node:net");
const http = require("node:http");

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    if (typeof args[1] !== "string") args.splice(1, 0, "127.0.0.1");
    else args[1] = "127.0.0.1";
  } else if (first && typeof first === "object" && first.path === undefined) {
    args[0] = { ...first, host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};

const emit = http.Server.prototype.emit;
http.Server.prototype.emit = function (event, req, res, ...rest) {
  if (event === "request") {
    const writeHead = res.writeHead;
    let logged = false;
    const log = () => {
      if (logged) return;
      logged = true;
      process.stdout.write(`SEEN ${req.method} ${req.url} ${res.statusCode}\n`);
    };
    // At the head, so that long-lived SSE streams are seen too.
    res.writeHead = function (...a) {
      const out = writeHead.apply(this, a);
      log();
      return out;
    };
    res.on("finish", log);
  }
  return emit.call(this, event, req, res, ...rest);
};
