// An MCP server on the TypeScript SDK v2 (npm `@modelcontextprotocol/server`
// with `@modelcontextprotocol/node`), a peer for tests/interop.rs. It serves
// 2026-07-28 on one endpoint, /mcp, on 127.0.0.1, and (with the default
// `--legacy stateless`) the 2025 handshake statelessly beside it: no session
// id, GET and DELETE 405. `--legacy reject` serves 2026-07-28 only.
//
//     node ts2_server.mjs --port P [--legacy stateless|reject] [--modules DIR]
//
// The packages are loaded from DIR/node_modules (default: .peers/node2 of
// this repository, where .ci/install-peers puts them).
//
// Tools: `echo`, `add`, `regional` (its `region` is mirrored in the
// `Mcp-Param-Region` header: `x-mcp-header` through zod's `.meta`), and
// `confirm` (asks for a confirmation inside its result, a multi round-trip
// request, and answers once it has one).
//
// Prints `LISTENING <port>` once listening and `SEEN <METHOD> <path>
// <status> <content-type>` per HTTP exchange, like the other peers.
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}
const here = path.dirname(fileURLToPath(import.meta.url));
const modules = path.resolve(option("modules", path.join(here, "../../.peers/node2")));
const require = createRequire(path.join(modules, "package.json"));
const { createMcpHandler, McpServer, acceptedContent, inputRequired } = require("@modelcontextprotocol/server");
const { toNodeHandler } = require("@modelcontextprotocol/node");
const z = require("zod");
const port = Number(option("port", "0"));
const legacy = option("legacy", "stateless");
if (!["stateless", "reject"].includes(legacy)) {
  console.error(`--legacy stateless|reject, not ${legacy}`);
  process.exit(2);
}

function factory() {
  const server = new McpServer({ name: "ts2-peer", version: "1.0.0" });
  server.registerTool(
    "echo",
    { description: "Echoes the text back.", inputSchema: z.object({ text: z.string() }) },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );
  server.registerTool(
    "add",
    { description: "Adds two integers.", inputSchema: z.object({ a: z.number().int(), b: z.number().int() }) },
    async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }),
  );
  server.registerTool(
    "regional",
    {
      description: "Runs a query in a region named in the Mcp-Param-Region header.",
      inputSchema: z.object({
        region: z.string().meta({ "x-mcp-header": "Region" }),
        query: z.string(),
      }),
    },
    async ({ region, query }) => ({ content: [{ type: "text", text: `${query} in ${region}` }] }),
  );
  const confirmation = z.object({ confirmed: z.boolean() });
  server.registerTool(
    "confirm",
    { description: "Asks for a confirmation first.", inputSchema: z.object({ action: z.string() }) },
    async ({ action }, ctx) => {
      const answer = acceptedContent(ctx.mcpReq.inputResponses, "confirm", confirmation);
      if (answer?.confirmed !== true) {
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({ message: `Really ${action}?`, requestedSchema: confirmation }),
          },
        });
      }
      return { content: [{ type: "text", text: `${action}: confirmed` }] };
    },
  );
  return server;
}

const mcp = toNodeHandler(createMcpHandler(factory, { legacy }));

const server = http.createServer((req, res) => {
  let logged = false;
  let kind = null;
  const log = () => {
    if (logged) return;
    logged = true;
    kind ??= res.getHeader("content-type");
    process.stdout.write(`SEEN ${req.method} ${req.url} ${res.statusCode} ${String(kind ?? "-").split(";")[0]}\n`);
  };
  // At the head, so that long-lived SSE streams are seen too. The headers
  // given to writeHead itself are not visible through getHeader.
  const writeHead = res.writeHead;
  res.writeHead = function (...args) {
    const headers = args.find((a) => a && typeof a === "object");
    if (Array.isArray(headers)) {
      const at = headers.findIndex((h, i) => i % 2 === 0 && String(h).toLowerCase() === "content-type");
      if (at >= 0) kind = headers[at + 1];
    } else if (headers) {
      for (const [name, value] of Object.entries(headers)) {
        if (name.toLowerCase() === "content-type") kind = value;
      }
    }
    const out = writeHead.apply(this, args);
    log();
    return out;
  };
  res.on("finish", log);
  if (new URL(req.url, "http://127.0.0.1").pathname !== "/mcp") {
    res.writeHead(404, { "content-type": "text/plain" }).end("not found");
    return;
  }
  mcp(req, res).catch((error) => {
    console.error(error);
    if (!res.headersSent) res.writeHead(500).end();
  });
});
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
