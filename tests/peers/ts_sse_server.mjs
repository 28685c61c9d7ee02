// A server of the deprecated 2024-11-05 HTTP+SSE transport on the TypeScript
// SDK v1 (npm `@modelcontextprotocol/sdk` 1.32, `SSEServerTransport`), a
// peer for tests/interop.rs, on 127.0.0.1: `GET /sse` opens the stream,
// whose first event (`endpoint`) names `/messages?sessionId=<uuid>`; each
// POST there is answered 202 and its answer comes on the stream (LF line
// ends). Nothing else is served (404).
//
//     node ts_sse_server.mjs --port P [--modules DIR]
//
// The packages are loaded from DIR/node_modules (default: .peers/node-sse of
// this repository, where .ci/install-peers puts them).
//
// Tools: `echo`, `add`. Prints `LISTENING <port>`, `SEEN <METHOD> <path>
// <status> <content-type>` when each HTTP exchange's answer starts and
// `ENDED <METHOD> <path>` when it is over (for the stream: closed).
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}
const here = path.dirname(fileURLToPath(import.meta.url));
const modules = path.resolve(option("modules", path.join(here, "../../.peers/node-sse")));
const require = createRequire(path.join(modules, "package.json"));
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { SSEServerTransport } = require("@modelcontextprotocol/sdk/server/sse.js");
const z = require("zod");
const port = Number(option("port", "0"));

function build() {
  const server = new McpServer({ name: "ts-sse-peer", version: "1.32.2" });
  server.registerTool(
    "echo",
    { description: "Echoes the text back.", inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );
  server.registerTool(
    "add",
    { description: "Adds two integers.", inputSchema: { a: z.number().int(), b: z.number().int() } },
    async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }),
  );
  return server;
}

const transports = new Map();

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, "http://127.0.0.1");
  let logged = false;
  const log = () => {
    if (logged) return;
    logged = true;
    const kind = String(res.getHeader("content-type") ?? "-").split(";")[0];
    process.stdout.write(`SEEN ${req.method} ${url.pathname} ${res.statusCode} ${kind}\n`);
  };
  res.on("close", () => {
    log();
    process.stdout.write(`ENDED ${req.method} ${url.pathname}\n`);
  });
  // The SSE head is flushed by writeHead; log at once so that the stream
  // is seen while it is open.
  const writeHead = res.writeHead;
  res.writeHead = function (...args) {
    for (const a of args) {
      if (a && typeof a === "object" && !Array.isArray(a)) {
        for (const [name, value] of Object.entries(a)) {
          if (name.toLowerCase() === "content-type") res.setHeader("content-type", value);
        }
      }
    }
    const out = writeHead.apply(this, args);
    log();
    return out;
  };
  try {
    if (req.method === "GET" && url.pathname === "/sse") {
      const transport = new SSEServerTransport("/messages", res);
      transports.set(transport.sessionId, transport);
      res.on("close", () => transports.delete(transport.sessionId));
      await build().connect(transport);
    } else if (req.method === "POST" && url.pathname === "/messages") {
      const transport = transports.get(url.searchParams.get("sessionId") ?? "");
      if (!transport) {
        res.writeHead(404, { "content-type": "text/plain" }).end("unknown session");
        return;
      }
      await transport.handlePostMessage(req, res);
    } else if (url.pathname === "/sse" || url.pathname === "/messages") {
      res.writeHead(405, { "content-type": "text/plain" }).end("method not allowed");
    } else {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found");
    }
  } catch (error) {
    console.error(error);
    if (!res.headersSent) res.writeHead(500).end();
  }
});
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
