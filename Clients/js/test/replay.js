// Replays one protocol vector (Protocol/vectors/README.md) through the JS
// client: each vector client is a `Tally` (no hello of its own, no
// reconnect), every `send` goes through `callExact`/`callText`, and every
// `expect` takes the next message that client decoded. A reply must also be
// what the client handed to the request it answers (replies pair with
// requests in order), so the replay checks the client's pairing too.
// Runs in a browser page (test/vectors.html) and in node (vectors.test.mjs).

import { Tally } from "../tally.js";

export const ANY = "<any>";
export const ABSENT = "<absent>";
const EXPECT_TIMEOUT_MS = 5000;

const isNumber = (value) => typeof value === "number";
const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

/** Every place where `actual` fails `pattern` (empty when it matches). */
export function mismatches(pattern, actual, where = "$") {
  if (pattern === ANY) return [];
  if (pattern === ABSENT) return [`${where}: "<absent>" is only meaningful as an object member's value`];
  if (isObject(pattern)) {
    if (!isObject(actual)) return [`${where}: expected an object, got ${JSON.stringify(actual)}`];
    const problems = [];
    for (const [key, sub] of Object.entries(pattern)) {
      const here = `${where}.${key}`;
      if (sub === ABSENT) {
        if (Object.hasOwn(actual, key)) problems.push(`${here}: must be absent, got ${JSON.stringify(actual[key])}`);
      } else if (!Object.hasOwn(actual, key)) {
        problems.push(`${here}: missing`);
      } else {
        problems.push(...mismatches(sub, actual[key], here));
      }
    }
    return problems;
  }
  if (Array.isArray(pattern)) {
    if (!Array.isArray(actual)) return [`${where}: expected an array, got ${JSON.stringify(actual)}`];
    if (actual.length !== pattern.length) return [`${where}: expected ${pattern.length} elements, got ${actual.length}`];
    return pattern.flatMap((sub, index) => mismatches(sub, actual[index], `${where}[${index}]`));
  }
  if (isNumber(pattern)) {
    return isNumber(actual) && actual === pattern ? [] : [`${where}: expected ${JSON.stringify(pattern)}, got ${JSON.stringify(actual)}`];
  }
  return pattern === actual ? [] : [`${where}: expected ${JSON.stringify(pattern)}, got ${JSON.stringify(actual)}`];
}

/** One vector client: a Tally connection and what it has received. */
class VectorClient {
  constructor(url, WebSocket) {
    this.inbox = [];
    this.waiters = [];
    this.calls = []; // outstanding requests, oldest first: {promise, settled, value}
    this.tally = new Tally({ url, hello: false, reconnect: false, client: "vectors", requestTimeoutMs: 0, WebSocket });
    this.tally.on("message", (message) => {
      const waiter = this.waiters.shift();
      if (waiter) waiter(message); else this.inbox.push(message);
    });
  }

  next(timeoutMs) {
    if (this.inbox.length) return Promise.resolve(this.inbox.shift());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new Error(`nothing received within ${timeoutMs / 1000} s`));
      }, timeoutMs);
      const waiter = (message) => { clearTimeout(timer); resolve(message); };
      this.waiters.push(waiter);
    });
  }

  track(promise) {
    const call = { settled: false, value: undefined, error: undefined };
    call.promise = promise.then((value) => { call.settled = true; call.value = value; },
      (error) => { call.settled = true; call.error = error; });
    this.calls.push(call);
  }
}

/**
 * Replays `vector` against the hub at `url` (`ws://…/v1/ws`). Resolves with
 * `{ok, problems, transcript}`; never rejects.
 */
export async function replayVector(vector, { url, WebSocket, timeoutMs = EXPECT_TIMEOUT_MS } = {}) {
  const clients = new Map();
  const transcript = [];
  const problems = [];
  const short = (text) => (text.length > 300 ? text.slice(0, 300) + "…" : text);
  const client = async (name) => {
    if (!clients.has(name)) {
      const created = new VectorClient(url, WebSocket);
      clients.set(name, created);
      await created.tally.connect();
      transcript.push(`    ${name}: (connected)`);
    }
    return clients.get(name);
  };
  try {
    for (const [index, step] of vector.steps.entries()) {
      const name = step.client;
      const where = `step ${index} (client ${name})`;
      if (step.close) {
        clients.get(name)?.tally.close();
        clients.delete(name);
        transcript.push(`${String(index).padStart(3)} ${name}: (closed)`);
        continue;
      }
      const vc = await client(name);
      if (step.send !== undefined || step.sendText !== undefined) {
        const text = step.sendText !== undefined ? step.sendText : JSON.stringify(step.send);
        transcript.push(`${String(index).padStart(3)} ${name} -> ${short(text)}`);
        vc.track(step.sendText !== undefined ? vc.tally.callText(step.sendText) : vc.tally.callExact(step.send));
        continue;
      }
      let message;
      try {
        message = await vc.next(timeoutMs);
      } catch (error) {
        problems.push(`${where}: ${error.message}; pattern ${JSON.stringify(step.expect)}`);
        break;
      }
      transcript.push(`${String(index).padStart(3)} ${name} <- ${short(JSON.stringify(message))}`);
      const found = mismatches(step.expect, message);
      if (found.length) {
        problems.push(`${where}: mismatch:\n    ${found.join("\n    ")}\n  pattern: ${JSON.stringify(step.expect)}\n  actual:  ${JSON.stringify(message)}`);
        break;
      }
      if (isObject(message) && typeof message.op !== "string") {
        // A reply: the client must have given this very message to the oldest request.
        const call = vc.calls.shift();
        if (!call) { problems.push(`${where}: a reply, but the client has no request outstanding`); break; }
        await call.promise;
        if (call.error) { problems.push(`${where}: the request failed in the client: ${call.error.message}`); break; }
        if (call.value !== message) { problems.push(`${where}: the client paired this reply with another request`); break; }
      }
    }
  } catch (error) {
    problems.push(`the replay failed: ${error?.stack || error}`);
  } finally {
    for (const vc of clients.values()) vc.tally.close();
  }
  return { ok: problems.length === 0, problems, transcript };
}
