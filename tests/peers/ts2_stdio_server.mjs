// An MCP server on the TypeScript SDK v2 (npm `@modelcontextprotocol/server`)
// over stdio, a peer for the stdio tests: the SDK's own stdio entry,
// `serveStdio` from `@modelcontextprotocol/server/stdio`, which lets the
// opening message pick the era of the connection: `server/discover` (or any
// request carrying the 2026-07-28 `_meta`) serves 2026-07-28, `initialize`
// the 2025 handshake (with the default `--legacy serve`); `--legacy reject`
// answers a 2025 opening with the unsupported-version error and keeps
// waiting for a modern one.
//
//     node ts2_stdio_server.mjs [--legacy serve|reject] [--modules DIR]
//
// The packages are loaded from DIR/node_modules (default: .peers/node2 of
// this repository, where .ci/install-peers puts them).
//
// Tools: `echo`, `add`. Nothing but JSON-RPC goes to stdout; it exits once
// its stdin is closed (the transport closes, nothing keeps node alive), and
// on SIGTERM or SIGINT.
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
const { McpServer } = require("@modelcontextprotocol/server");
const { serveStdio } = require("@modelcontextprotocol/server/stdio");
const z = require("zod");
const legacy = option("legacy", "serve");
if (!["serve", "reject"].includes(legacy)) {
  console.error(`--legacy serve|reject, not ${legacy}`);
  process.exit(2);
}

function factory() {
  const server = new McpServer({ name: "ts2-stdio-peer", version: "1.0.0" });
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
  return server;
}

serveStdio(factory, { legacy, onerror: (error) => console.error(`ts2-stdio-peer: ${error}`) });
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
