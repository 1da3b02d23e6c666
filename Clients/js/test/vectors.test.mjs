// node's test runner for the JS client: replays every file in
// Protocol/vectors/ against a fresh `tally serve` each (port 0, temporary
// --data), then runs the API checks. Needs a WebSocket in node: node 22 has
// one; node 20 needs --experimental-websocket:
//
//   TALLY_BIN=.build/debug/tally node --experimental-websocket --test Clients/js/test/
//
// CI runs the same replay inside Chromium instead (Tests/browser/test_js_client.py),
// since node is not part of the test machine's install.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { replayVector } from "./replay.js";
import { runClientChecks } from "./client-checks.js";
import { Tally, State } from "../tally.js";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../../..");
const vectorsDir = join(repo, "Protocol", "vectors");
const tallyBin = process.env.TALLY_BIN || join(repo, ".build", "debug", "tally");
const skip = typeof WebSocket === "undefined" ? "no WebSocket in this node (use node 22, or --experimental-websocket)" : false;

/** Starts a hub on 127.0.0.1:0 with its own data directory; resolves with {url, stop}. */
function startHub() {
  const data = mkdtempSync(join(tmpdir(), "tally-js-"));
  const child = spawn(tallyBin, ["serve", "--host", "127.0.0.1", "--port", "0", "--data", join(data, "store")],
    { cwd: data, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (chunk) => { stderr += chunk; });
  const stop = () => new Promise((done) => {
    if (child.exitCode !== null) { rmSync(data, { recursive: true, force: true }); return done(); }
    const timer = setTimeout(() => child.kill("SIGKILL"), 8000);
    child.once("exit", () => { clearTimeout(timer); rmSync(data, { recursive: true, force: true }); done(); });
    child.kill("SIGTERM");
  });
  return new Promise((resolveHub, reject) => {
    let out = "";
    const timer = setTimeout(() => { stop(); reject(new Error(`tally did not start within 10 s: ${stderr}`)); }, 10000);
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const match = /tally listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
      if (match) { clearTimeout(timer); resolveHub({ url: `ws://127.0.0.1:${match[1]}/v1/ws`, stop, stderr: () => stderr }); }
    });
    child.once("exit", (code) => { clearTimeout(timer); reject(new Error(`tally exited (${code}): ${stderr}`)); });
  });
}

const files = readdirSync(vectorsDir).filter((name) => name.endsWith(".json")).sort();

for (const file of files) {
  test(`vector ${file}`, { skip, timeout: 60000 }, async () => {
    const vector = JSON.parse(readFileSync(join(vectorsDir, file), "utf8"));
    const hub = await startHub();
    try {
      const result = await replayVector(vector, { url: hub.url });
      assert.ok(result.ok, `${file}:\n${result.problems.join("\n")}\ntranscript:\n${result.transcript.slice(-20).join("\n")}`);
    } finally {
      await hub.stop();
    }
  });
}

test("client API checks", { skip, timeout: 120000 }, async () => {
  const hub = await startHub();
  try {
    const result = await runClientChecks({ url: hub.url });
    assert.ok(result.ok, result.problems.join("\n"));
  } finally {
    await hub.stop();
  }
});

test("moves to the next hub when its hub stops, and resumes there with since", { skip, timeout: 60000 }, async () => {
  const [first, second] = [await startHub(), await startHub()];
  try {
    // Two independent hubs stand for a cluster: the second, further along,
    // answers the resume with its changes after the client's seq.
    const writer = new Tally({ url: second.url, WebSocket });
    await writer.connect();
    for (let n = 0; n < 3; n += 1) await writer.set(`items/b${n}`, { n });
    writer.close();
    const client = new Tally([first.url, second.url], { WebSocket, initialDelayMs: 20, maxDelayMs: 200 });
    const sub = client.prefix("items/");
    await client.connect();
    await client.set("items/a0", { n: 0 });
    await until("the first hub's push", () => sub.value.has("items/a0"));
    assert.equal(client.url, first.url);
    await first.stop();
    await until("live on the second hub", () => client.state === State.live && client.url === second.url, 20000);
    await until("the second hub's changes after seq 1", () => sub.value.has("items/b2"), 10000);
    assert.ok(!sub.value.has("items/b0"), "resumed with since = 1, not a snapshot");
    assert.ok(!sub.lastSnapshot.resnapshot);
    client.close();
  } finally {
    await first.stop();
    await second.stop();
  }
});

async function until(what, condition, ms = 10000) {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
