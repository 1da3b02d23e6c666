// The JS client's API against a live hub (an empty one: run it on a fresh
// hub): reads and writes, the state every kind of subscription keeps
// (checked against a fresh `get` after each write), events, errors,
// idempotency, and a dropped connection that reconnects and resumes from the
// last seen sequence with nothing lost and nothing twice.
// Runs in the browser (test/vectors.html) and in node (vectors.test.mjs).

import { Tally, TallyError, State, backoffDelay, valueAt, conflictResolution, isOpenConflict } from "../tally.js";

const WAIT_MS = 5000;

function equal(a, b) {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}
function canonical(value) {
  if (value instanceof Map) return canonical(Object.fromEntries(value));
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((key) => [key, canonical(value[key])]));
  }
  return value;
}

async function until(what, condition, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** A WebSocket that hands its messages on in bursts: every message that
 *  arrives within `ms` of the first goes to the handler in one synchronous
 *  loop, as node's WebSocket does with the messages of one read (so a
 *  reply's promise continues only after the pushes behind it were seen). */
function bursting(Impl, { ms = 40, onSend = null } = {}) {
  return class extends Impl {
    send(data) {
      super.send(data);
      if (onSend) onSend(String(data));
    }

    set onmessage(handler) {
      let held = [];
      super.onmessage = (event) => {
        held.push(event);
        if (held.length > 1) return;
        setTimeout(() => { const burst = held; held = []; for (const each of burst) handler(each); }, ms);
      };
    }
  };
}

/** A WebSocket whose first reply to a subscribe is replaced by the hub's
 *  "not now" (`code`): what a hub that cannot reach its database answers. */
function notNowOnFirstSubscribe(Impl, code, seen) {
  return class extends Impl {
    send(data) {
      const message = JSON.parse(String(data));
      if (!seen.refused && message.op === "subscribe" && seen.id === undefined) seen.id = message.id;
      super.send(data);
    }

    set onmessage(handler) {
      super.onmessage = (event) => {
        const message = seen.refused || seen.id === undefined ? null : JSON.parse(event.data);
        if (message && message.op === undefined && message.id === seen.id) {
          seen.refused = true;
          handler({ data: JSON.stringify({ id: message.id, ok: false, error: { code, message: "the hub cannot reach its database" } }) });
          return;
        }
        handler(event);
      };
    }
  };
}

async function refusal(promise) {
  try { await promise; } catch (error) { return error; }
  throw new Error("expected a refusal, the request succeeded");
}

/** Runs every check; resolves with `{ok, problems, passed}`. */
export async function runClientChecks({ url, WebSocket } = {}) {
  const problems = [];
  const passed = [];
  const clients = [];
  const open = async (options = {}) => {
    const client = new Tally({ url, WebSocket, client: "checks", initialDelayMs: 20, maxDelayMs: 200, ...options });
    clients.push(client);
    await client.connect();
    return client;
  };
  const check = async (name, body) => {
    try { await body(); passed.push(name); } catch (error) { problems.push(`${name}: ${error?.stack || error}`); }
  };
  const assert = (condition, message) => { if (!condition) throw new Error(message); };

  await check("backoff has full jitter and a cap", async () => {
    assert(backoffDelay(0, { initialDelayMs: 100, maxDelayMs: 1000 }, () => 0.999) === 99, "attempt 0 stays under 100 ms");
    assert(backoffDelay(3, { initialDelayMs: 100, maxDelayMs: 1000 }, () => 0.5) === 400, "attempt 3: half of 800");
    assert(backoffDelay(30, { initialDelayMs: 100, maxDelayMs: 1000 }, () => 0.999) === 999, "capped at 1000");
    assert(backoffDelay(5, {}, () => 0) === 0, "full jitter reaches 0");
  });

  let a, b;
  await check("connect says hello and goes live", async () => {
    const states = [];
    a = new Tally({ url, WebSocket, client: "checks-a", initialDelayMs: 20, maxDelayMs: 200 });
    clients.push(a);
    a.onState((state) => states.push(state));
    await a.connect();
    assert(a.state === State.live, `state ${a.state}`);
    assert(a.role === "admin" && a.user === "checks-a", `user ${a.user}, role ${a.role}`);
    assert(equal(states, ["offline", "connecting", "live"]), `states ${states}`);
    b = await open({ client: "checks-b" });
  });
  if (!a || !b) return { ok: false, problems, passed };

  await check("record writes and a record subscription's state", async () => {
    const seen = [];
    const sub = a.record("c/1", (envelope, change) => seen.push(change ? change.seq : "snapshot"));
    await sub.ready;
    assert(sub.value === null, "a missing record's snapshot is null");
    const steps = [
      () => b.set("c/1", { a: 1, list: [1, 2], nested: { x: "y" } }),
      () => b.setPath("c/1", "list[2]", 3),
      () => b.setPath("c/1", "nested.deep.z", true),
      () => b.merge("c/1", { a: null, m: 5 }),
      () => b.increment("c/1", "count", 2.5),
      () => b.deletePath("c/1", "list[0]"),
      () => b.set("c/1", { fresh: [] }),
    ];
    for (const step of steps) {
      const reply = await step();
      await until(`push ${reply.seq}`, () => sub.value?.seq === reply.seq);
      const fresh = await a.get("c/1");
      assert(equal(sub.value.data, fresh.data), `after seq ${reply.seq}: ${JSON.stringify(sub.value.data)} != ${JSON.stringify(fresh.data)}`);
      assert(sub.value.version === fresh.version, `version ${sub.value.version} != ${fresh.version}`);
    }
    const deleted = await b.delete("c/1");
    await until("the delete", () => sub.value === null && sub.seq === deleted.seq);
    assert(seen.length === steps.length + 2 && seen[0] === "snapshot", `listener calls ${seen}`);
    await sub.unsubscribe();
    await b.set("c/1", { after: true });
    assert((await a.get("c/1")).version === 1, "recreated at version 1");
    assert(sub.value === null, "no pushes after unsubscribe");
  });

  await check("path subscription follows one value", async () => {
    await b.set("p/1", { a: { b: 1, c: 2 }, other: 0 });
    const sub = a.subscribe({ name: "p/1", path: "a.b" });
    await sub.ready;
    assert(sub.value === 1, `snapshot value ${sub.value}`);
    const steps = [
      () => b.setPath("p/1", "a.b", { deep: [1] }),
      () => b.setPath("p/1", "a.b.deep[1]", 2),
      () => b.setPath("p/1", "a", { b: "whole" }),
      () => b.set("p/1", { a: { b: 7 } }),
      () => b.deletePath("p/1", "a.b"),
      () => b.setPath("p/1", "a.b", 9),
    ];
    for (const step of steps) {
      const reply = await step();
      await until(`path push ${reply.seq}`, () => sub.seq >= reply.seq);
      let expected;
      try { expected = (await a.get("p/1", { path: "a.b" })).value; } catch (error) { if (error.code !== "not_found") throw error; }
      assert(equal(sub.value, expected), `after seq ${reply.seq}: ${JSON.stringify(sub.value)} != ${JSON.stringify(expected)}`);
    }
    const other = await b.setPath("p/1", "other", 1); // does not overlap: no push to this subscription
    const later = await b.setPath("p/1", "a.b", 10);
    await until("the later push", () => sub.seq === later.seq);
    assert(sub.value === 10 && other.seq < later.seq, "value after an unrelated write");
    await sub.unsubscribe();
  });

  await check("prefix subscription keeps every record under it", async () => {
    await b.set("q/1", { n: 1 });
    const sub = a.prefix("q/");
    await sub.ready;
    assert(sub.value.size === 1, "one record in the snapshot");
    await b.set("q/2", { n: 2 });
    await b.setPath("q/1", "n", 11);
    await b.set("qq/1", { outside: true });
    const last = await b.delete("q/2");
    await until("the prefix pushes", () => sub.seq >= last.seq);
    const page = await a.getPrefix("q/");
    assert(equal([...sub.value.keys()], page.records.map((r) => r.name)), `names ${[...sub.value.keys()]}`);
    for (const record of page.records) assert(equal(sub.value.get(record.name).data, record.data), `data of ${record.name}`);
    await sub.unsubscribe();
  });

  await check("a live query keeps its result and reports change sets", async () => {
    await b.set("items/lq", { sku: "LQ", stock: 100 });
    const open = { prefix: "orders/lq-", where: { stage: ["received", "in-progress", "ready"] } };
    await b.set("orders/lq-1", { item: "items/lq", qty: 1 });
    const sets = [];
    const sub = a.query(open, (records, changes) => { if (changes) sets.push(changes); });
    await sub.ready;
    assert(equal([...sub.value.keys()], ["orders/lq-1"]), `snapshot ${[...sub.value.keys()]}`);
    await b.set("orders/lq-2", { item: "items/lq", qty: 1 });
    await b.advance("orders/lq-1", { to: "in-progress" });
    await b.advance("orders/lq-1", { to: "ready" });
    const last = await b.advance("orders/lq-1", { to: "delivered" });
    await until("the query pushes", () => sub.seq >= last.seq);
    assert(equal(sets.map((set) => [set.entered, set.changed, set.left]),
      [[["orders/lq-2"], [], []], [[], ["orders/lq-1"], []], [[], ["orders/lq-1"], []], [[], [], ["orders/lq-1"]]]),
      JSON.stringify(sets));
    assert(equal([...sub.value.keys()], ["orders/lq-2"]), `result ${[...sub.value.keys()]}`);
    const page = await a.getQuery(open);
    assert(equal(page.records.map((r) => r.name), ["orders/lq-2"]), JSON.stringify(page));
    // Away while the result changes: the resume reports it as one change set.
    sets.length = 0;
    a.socket.close();
    await b.set("orders/lq-3", { item: "items/lq", qty: 1 });
    await b.advance("orders/lq-2", { to: "cancelled" });
    await until("live again with the result as it is", () => a.state === State.live && sub.value.has("orders/lq-3")
      && !sub.value.has("orders/lq-2"), 15000);
    const moved = sets.flatMap((set) => [...set.entered.map((n) => `+${n}`), ...set.left.map((n) => `-${n}`)]).sort();
    assert(equal(moved, ["+orders/lq-3", "-orders/lq-2"]), JSON.stringify(sets));
    await sub.unsubscribe();
  });

  await check("a prefix of more than 10,000 records is paged in full", async () => {
    for (let batch = 0; batch < 11; batch += 1) {
      const ops = [];
      for (let i = 0; i < 1000; i += 1) ops.push({ op: "set", name: `big/${String(batch * 1000 + i).padStart(5, "0")}`, data: { i: batch * 1000 + i } });
      await b.write(ops);
    }
    const sub = a.prefix("big/");
    await sub.ready;
    assert(sub.value.size === 11000, `${sub.value.size} records`);
    assert(sub.value.get("big/10999").data.i === 10999, "the last page is in");
    await sub.unsubscribe();
  });

  await check("list operations and a list subscription", async () => {
    const sub = a.list("l/1");
    await sub.ready;
    assert(sub.value === null, "missing list");
    const steps = [
      () => b.addEntry("l/1", "x/1"), () => b.addEntry("l/1", "x/2"), () => b.addEntry("l/1", "x/0", { at: 0 }),
      () => b.addEntry("l/1", "x/1"), () => b.removeEntry("l/1", "x/1"), () => b.setEntries("l/1", ["y/1", "y/2", "y/1"]),
      () => b.removeEntry("l/1", "y/1", { at: 2 }),
    ];
    for (const step of steps) {
      const reply = await step();
      await until(`list push ${reply.seq}`, () => sub.seq >= reply.seq);
      const fresh = await a.getList("l/1");
      assert(equal(sub.value.entries, fresh.entries), `${sub.value.entries} != ${fresh.entries}`);
    }
    const gone = await b.deleteList("l/1");
    await until("the list delete", () => sub.seq >= gone.seq);
    assert(sub.value === null, "deleted list");
  });

  await check("a list longer than a page is paged in whole, with the changes made meanwhile", async () => {
    for (let batch = 0; batch < 25; batch += 1) {
      const ops = [];
      for (let i = 0; i < 1000; i += 1) ops.push({ op: "addEntry", list: "long/1", entry: `e/${batch * 1000 + i}` });
      await b.write(ops);
    }
    const first = await a.getList("long/1", { limit: 3 });
    assert(first.more === true && first.count === 25000 && equal(first.entries, ["e/0", "e/1", "e/2"]), JSON.stringify(first));
    const sub = a.list("long/1");
    // Written while the subscription pages: before, inside and after the loaded part.
    const writes = [b.addEntry("long/1", "early", { at: 3 }), b.removeEntry("long/1", "e/12000"),
      b.addEntry("long/1", "late"), b.removeEntry("long/1", "e/24999"), b.addEntry("long/1", "mid", { at: 15000 })];
    await sub.ready;
    const replies = await Promise.all(writes);
    await until("every change", () => sub.seq >= replies[replies.length - 1].seq);
    let page = await a.getList("long/1");
    const whole = [...page.entries];
    while (page.more) { page = await a.getList("long/1", { cursor: page.cursor }); whole.push(...page.entries); }
    assert(whole.length === 25001, `${whole.length} entries`);
    assert(equal(sub.value.entries, whole), "the subscription's entries are the list's");
    assert(sub.value.more === undefined && sub.value.cursor === undefined, "no paging members left");
    await sub.unsubscribe();
  });

  await check("a long list paged in stays exact when the page's last entry goes and one comes in its place", async () => {
    for (let batch = 0; batch < 2; batch += 1) {
      const ops = [];
      for (let i = 0; i < 6000; i += 1) ops.push({ op: "addEntry", list: "long/2", entry: `e/${batch * 6000 + i}` });
      for (let start = 0; start < 6000; start += 1000) await b.write(ops.slice(start, start + 1000));
    }
    // Sent on the subscribing connection right behind the subscribe: the hub
    // answers them after the first page and before the second. The new
    // entry's key falls below the first page's cursor, so the second page
    // (after the cursor) does not have it: the subscription must start again.
    const sub = a.list("long/2");
    const removed = a.removeEntry("long/2", "e/9999");
    const added = a.addEntry("long/2", "boundary", { at: 9999 });
    await sub.ready;
    const [, last] = await Promise.all([removed, added]);
    await until("both changes", () => sub.seq >= last.seq);
    const expected = [];
    for (let i = 0; i < 12000; i += 1) if (i !== 9999) expected.push(`e/${i}`);
    expected.splice(9999, 0, "boundary");
    assert(equal(sub.value.entries, expected), `${sub.value.entries.length} entries, at 9999: ${sub.value.entries[9999]}`);
    await sub.unsubscribe();
  });

  await check("pushes dispatched together with the subscribe's reply are not lost", async () => {
    // When c asks for the prefix's second page, b changes a record of the
    // first: its push reaches c while the later pages load.
    let pageAsked = null;
    const onSend = (text) => { if (!pageAsked && text.includes('"after"')) pageAsked = b.set("burst/p/00000", { v: 1 }); };
    const c = await open({ client: "checks-burst", WebSocket: bursting(WebSocket || globalThis.WebSocket, { onSend }) });
    await b.set("burst/r", { v: 1 });
    for (let batch = 0; batch < 11; batch += 1) {
      const ops = [];
      for (let i = 0; i < 1000; i += 1) ops.push({ op: "set", name: `burst/p/${String(batch * 1000 + i).padStart(5, "0")}`, data: { v: 0 } });
      await b.write(ops);
    }
    // Sent right behind each subscribe on the same connection: the reply
    // and the push arrive in one burst.
    const record = c.record("burst/r");
    const set = c.set("burst/r", { v: 2 });
    const prefix = c.prefix("burst/p/");
    const [one] = await Promise.all([set, record.ready, prefix.ready]);
    await until("the record's push", () => record.seq >= one.seq);
    assert(record.value.data.v === 2, JSON.stringify(record.value));
    assert(pageAsked, "the prefix was read in pages");
    const two = await pageAsked;
    await until("the prefix's push", () => prefix.seq >= two.seq);
    assert(prefix.value.size === 11000, `${prefix.value.size} records`);
    assert(prefix.value.get("burst/p/00000").data.v === 1, JSON.stringify(prefix.value.get("burst/p/00000")));
    await record.unsubscribe();
    await prefix.unsubscribe();
  });

  await check("events reach topic subscribers", async () => {
    const got = [];
    const sub = a.topic("scanner", (data) => got.push(data));
    await sub.ready;
    const reply = await b.publish("scanner", { code: "SN-1" });
    assert(reply.delivered === 1, `delivered ${reply.delivered}`);
    await until("the event", () => got.length === 1);
    assert(equal(got[0], { code: "SN-1" }), JSON.stringify(got));
  });

  await check("refusals are TallyErrors with the hub's code and details", async () => {
    await b.set("v/1", { v: 1 });
    const conflict = await refusal(b.set("v/1", { v: 2 }, { version: 5 }));
    assert(conflict instanceof TallyError && conflict.code === "conflict" && conflict.details.version === 1, `${conflict.code}`);
    const missing = await refusal(b.get("v/none"));
    assert(missing.code === "not_found", missing.code);
    const forbidden = await refusal(b.set("stats/orders", {}));
    assert(forbidden.code === "forbidden", forbidden.code);
  });

  await check("workflow advance, atomic write and idempotency", async () => {
    await b.set("items/chk", { name: "Check item", stock: 5 });
    const created = await b.write([{ op: "set", name: "orders/chk-1", data: { item: "items/chk", qty: 2 } },
      { op: "set", name: "orders/chk-2", data: { item: "items/chk", qty: 1 } }]);
    assert(created.results.length === 2, "two results");
    const idem = Tally.idem();
    const first = await b.advance("orders/chk-1", { from: "received", to: "in-progress", idem });
    const again = await b.advance("orders/chk-1", { from: "received", to: "in-progress", idem });
    assert(first.seq === again.seq && first.to === "in-progress", "the retry answers the first reply");
    const illegal = await refusal(b.advance("orders/chk-1", { to: "delivered" }));
    assert(illegal.code === "illegal_transition" && equal(illegal.details.allowed, ["ready", "cancelled"]), JSON.stringify(illegal.details));
    await b.advance("orders/chk-1");
    await b.advance("orders/chk-1");
    assert((await b.get("items/chk")).data.stock === 3, "delivery took the stock");
    const stale = await refusal(b.advance("orders/chk-2", { from: "ready" }));
    assert(stale.code === "conflict" && stale.details.stage === "received", JSON.stringify(stale.details));
    // set's options carry checkStock: an issue order over the stock is refused when made.
    const short = await refusal(b.set("orders/chk-3", { item: "items/chk", qty: 4 }, { version: 0, checkStock: true }));
    assert(short.code === "insufficient_stock" && short.details.stock === 3 && short.details.needed === 4,
      JSON.stringify(short.details));
    await b.set("orders/chk-3", { item: "items/chk", qty: 3 }, { version: 0, checkStock: true });
    // An order for an item that does not exist is refused when made.
    const missing = await refusal(b.set("orders/chk-4", { item: "items/chk-typo", qty: 1 }));
    assert(missing.code === "not_found" && missing.details.item === "items/chk-typo", JSON.stringify(missing.details));
  });

  await check("a mirror's conflict is settled in one atomic write", async () => {
    const conflict = (id, name, field, local, hub) => b.set(`conflicts/${id}`, { name, field, local, hub, base: null,
      policy: "both", created: Date.now(), resolved: false, mirror: "mirror:checks:1" });
    await b.set("cf/1", { qty: 7, note: "hub" });
    await conflict("cf-1", "cf/1", "qty", 5, 7);
    await conflict("cf-2", "cf/1", "note", "local", "hub");
    await conflict("cf-3", "cf/2", "*", { qty: 1, extra: true }, null);
    await b.set("cf/3", { qty: 3 });
    await conflict("cf-4", "cf/3", "*", null, { qty: 3 });
    await conflict("cf-5", "cf/1", "note", null, "hub");
    const sub = a.prefix("conflicts/", () => {});
    await sub.ready;
    const open = () => [...sub.value.values()].filter(isOpenConflict).map((envelope) => envelope.name).sort();
    assert(equal(open(), ["conflicts/cf-1", "conflicts/cf-2", "conflicts/cf-3", "conflicts/cf-4", "conflicts/cf-5"]), `open ${open()}`);

    const first = sub.value.get("conflicts/cf-1");
    const reply = await a.resolveConflict(first, "local");
    assert(reply.results.length === 3, "the record's field, then resolved and take");
    assert(equal((await b.get("cf/1")).data, { qty: 5, note: "hub" }), "the local value at the field");
    const closed = (await b.get("conflicts/cf-1")).data;
    assert(closed.resolved === true && closed.take === "local", JSON.stringify(closed));
    await until("the subscription to see it closed", () => !open().includes("conflicts/cf-1"));
    // Settled elsewhere meanwhile: a second resolution from the old envelope is refused, nothing changes.
    const version = (await b.get("cf/1")).version;
    const stale = await refusal(a.resolveConflict(first, "local"));
    assert(stale.code === "conflict" && stale.details.index === 1, JSON.stringify(stale.details));
    assert((await b.get("cf/1")).version === version, "the whole write was refused: the record did not move");

    await a.resolveConflict(sub.value.get("conflicts/cf-2"), "hub");
    assert((await b.get("cf/1")).version === version, "keeping the hub's side leaves the record alone");
    assert((await b.get("conflicts/cf-2")).data.take === "hub", "closed with take hub");
    await a.resolveConflict(sub.value.get("conflicts/cf-3"), "local");
    assert(equal((await b.get("cf/2")).data, { qty: 1, extra: true }), "field * sets the whole record");
    await a.resolveConflict(sub.value.get("conflicts/cf-4"), "local");
    assert((await refusal(b.get("cf/3"))).code === "not_found", "field * with local null deletes the record");
    await a.resolveConflict(sub.value.get("conflicts/cf-5"), "local");
    assert(equal((await b.get("cf/1")).data, { qty: 5 }), "a field with local null is removed, not set to null");
    await until("no open conflicts", () => open().length === 0);
    sub.unsubscribe();

    const ops = conflictResolution({ name: "conflicts/w", version: 4, data: { name: "orders/w", field: "*",
      local: { stage: "ready", history: [], owner: "ana", qty: 2 } } }, "local", { keep: ["stage", "history", "owner"] });
    assert(equal(ops, [{ op: "set", name: "orders/w", data: { qty: 2 } },
      { op: "set", name: "conflicts/w", path: "resolved", value: true, version: 4 },
      { op: "set", name: "conflicts/w", path: "take", value: "local" }]), JSON.stringify(ops));
    let thrown = null;
    try { conflictResolution(first, "mine"); } catch (error) { thrown = error; }
    assert(thrown instanceof TypeError, "take is local or hub");
  });

  await check("a dropped connection resumes from the last seen seq", async () => {
    const states = [];
    const offState = a.onState((state) => states.push(state));
    const changes = [];
    const sub = a.prefix("r/", (records, change) => { if (change) changes.push(change.seq); });
    const listSub = a.list("rl");
    await Promise.all([sub.ready, listSub.ready]);
    const written = [(await b.set("r/1", { n: 0 })).seq];
    await until("the first push", () => changes.length === 1);
    const subscribes = [];
    const offMessage = a.on("message", () => {});
    const sent = a.socket.send.bind(a.socket);
    a.socket.close(); // the client did not ask for this: it must come back by itself
    for (let n = 1; n <= 5; n += 1) written.push((await b.setPath("r/1", "n", n)).seq);
    written.push((await b.addEntry("rl", "r/1")).seq);
    const queued = a.set("r/queued", { while: "reconnecting" }, { idem: Tally.idem() }); // waits for the connection
    // A hub that started moments ago may ask for up to 5 s before a resync (retryAfterMs).
    await until("live again", () => a.state === State.live && states.includes(State.reconnecting), 15000);
    const reply = await queued;
    await until("every missed change", () => sub.seq >= reply.seq && listSub.seq >= written[written.length - 1]);
    assert(equal(changes, [...written.slice(0, 6), reply.seq]), `changes ${changes} (written ${written}, queued ${reply.seq})`);
    assert(sub.value.get("r/1").data.n === 5 && sub.value.has("r/queued"), JSON.stringify([...sub.value]));
    assert(equal(listSub.value.entries, ["r/1"]), JSON.stringify(listSub.value));
    assert(!sub.lastSnapshot.resnapshot, "resumed, not resnapshotted");
    offState(); offMessage(); void sent; void subscribes;
  });

  await check("the constructor takes one hub or several; a hub that refuses gives way to the next", async () => {
    const one = new Tally(url, { WebSocket });
    assert(equal(one.urls, [one.url]) && one.url === a.url, `one: ${one.urls}`);
    const dead = "ws://127.0.0.1:1/v1/ws";
    // The same hub twice (ws:// and http:// forms): listed once.
    const listed = new Tally({ url: [dead, url, one.url.replace("ws://", "http://").replace("/v1/ws", "")], WebSocket,
      client: "checks-list", initialDelayMs: 20, maxDelayMs: 200 });
    clients.push(listed);
    assert(equal(listed.urls, [dead, one.url]), `urls ${listed.urls}`);
    const tried = [];
    listed.on("state", (state, detail) => { if (detail.url) tried.push(detail.url); });
    await listed.connect();
    assert(listed.url === one.url && listed.state === State.live, `connected to ${listed.url}`);
    assert(tried[0] === one.url, `after the refusal it tried ${tried}`);
    assert((await listed.set("h/1", { via: "list" })).version >= 1, "writes on the second hub");
    const positional = new Tally([dead, url], { WebSocket, client: "checks-positional", initialDelayMs: 20, maxDelayMs: 200 });
    clients.push(positional);
    await positional.connect();
    assert(positional.url === one.url, `positional: ${positional.url}`);
    // The clear-text token rule covers every hub of the list.
    const exposed = new Tally({ url: [url, "ws://hub.example:8080"], token: "t", WebSocket });
    const error = await refusal(exposed.connect());
    assert(error.code === "insecure" && error.message.includes("hub.example:8080"), `${error.code}: ${error.message}`);
  });

  await check("a hub's unavailable answer to a subscribe moves on and keeps the subscription", async () => {
    assert(new TallyError("unavailable", "x").retryable && new TallyError("storage_failed", "x").retryable, "retryable codes");
    assert(!new TallyError("conflict", "x").retryable, "a conflict is not retryable");
    await b.set("u/1", { n: 1 });
    const seen = {};
    const c = new Tally({ url, WebSocket: notNowOnFirstSubscribe(WebSocket ?? globalThis.WebSocket, "unavailable", seen),
      client: "checks-unavailable", initialDelayMs: 20, maxDelayMs: 200 });
    clients.push(c);
    const sub = c.record("u/1");
    await c.connect();
    await sub.ready;
    assert(seen.refused, "the first subscribe was answered unavailable");
    assert(!sub.failed && c.subscriptions.has(sub), `the subscription was dropped: ${sub.failed}`);
    assert(sub.value?.data?.n === 1, JSON.stringify(sub.value));
  });

  await check("requests while closed fail with closed", async () => {
    const c = await open({ client: "checks-c" });
    c.close();
    const error = await refusal(c.get("c/1"));
    assert(error.code === "closed" && c.state === State.offline, `${error.code} ${c.state}`);
  });

  await check("valueAt reads paths", async () => {
    assert(valueAt({ a: [{ b: 2 }] }, "a[0].b") === 2, "a[0].b");
    assert(valueAt({ a: [] }, "a[0]") === undefined, "past the end");
    assert(valueAt({ a: 1 }, "a.b") === undefined, "through a scalar");
  });

  for (const client of clients) client.close();
  return { ok: problems.length === 0, problems, passed };
}
