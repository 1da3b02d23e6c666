// Tally's browser client: an ES module with no build step and no
// dependencies. It speaks the sync protocol of Protocol/PROTOCOL.md over one
// WebSocket and keeps working across outages: it reconnects with
// exponential backoff and full jitter, says hello again (with the token),
// and resubscribes every subscription with `since` = the last sequence number
// it saw, so it receives exactly what it missed (or a fresh snapshot when the
// hub says `resnapshot`). Given several hubs of one cluster (hubs on one
// PostgreSQL database share their seqs) it goes round them, resuming the
// same way on whichever answers. Clients/js/README.md describes the API.

import { Subscription } from "./subscription.js";
import { conflictResolution } from "./conflicts.js";

export { parsePath, valueAt } from "./path.js";
export { applyRecordChange, applyListChange, applyPathChange } from "./changes.js";
export { Subscription } from "./subscription.js";
export { CONFLICT_PREFIX, isOpenConflict, conflictId, conflictResolution } from "./conflicts.js";

export const PROTOCOL_VERSION = 1;

/** Connection states, in the order a healthy client goes through them. */
export const State = Object.freeze({
  connecting: "connecting", // first connection attempt (or after connect() again)
  live: "live", //             connected, hello answered, subscriptions current
  reconnecting: "reconnecting", // lost the hub; retrying with backoff, or resyncing
  offline: "offline", //       not trying: closed, refused (bad token), or the browser is offline
});

/** Codes that say nothing about the request itself: sent again later (a
 *  write with its `idem` key), it may succeed. `storage_failed` (the hub's
 *  disk), `unavailable` (the hub cannot reach its database: the write was
 *  not acknowledged) and `shutting_down` are the hub's own "not now": the
 *  client leaves that connection for the next (hub) when one comes with a
 *  hello or a subscribe. */
export const RETRYABLE_CODES = Object.freeze(["disconnected", "timeout", "storage_failed", "unavailable", "shutting_down"]);
const HUB_NOT_NOW = new Set(["storage_failed", "unavailable", "shutting_down"]);

/** A refused request: `code` is the hub's stable error code (`conflict`,
 *  `not_found`, …) or one of the client's own: `disconnected` (the
 *  connection dropped before the reply; the request may or may not have
 *  been applied), `timeout`, `closed`, `insecure`. */
export class TallyError extends Error {
  constructor(code, message, details = {}) {
    super(message || code);
    this.name = "TallyError";
    this.code = code;
    this.details = details;
  }
  /** Whether sending it again later (with the same `idem`) may succeed. */
  get retryable() {
    return RETRYABLE_CODES.includes(this.code);
  }
  static fromReply(reply) {
    const error = reply.error || {};
    return new TallyError(error.code || "unknown", error.message || "refused", error);
  }
}

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i;

/** Whether a URL's host is this machine (tokens may travel in clear there). */
export function isLoopback(url) {
  try { return LOOPBACK.test(new URL(url).hostname) || new URL(url).hostname === "::1"; } catch { return false; }
}

/** The hub's WebSocket URL for a page served by the hub (http → ws). */
export function defaultURL(location = globalThis.location) {
  if (!location) return "ws://127.0.0.1:8080/v1/ws";
  return `${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}/v1/ws`;
}

/** Full-jitter exponential backoff ("Exponential Backoff And Jitter"):
 *  a uniform delay in [0, min(max, initial · 2^attempt)). */
export function backoffDelay(attempt, { initialDelayMs = 250, maxDelayMs = 15000 } = {}, random = Math.random) {
  const cap = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * cap);
}

/**
 * One hub connection, kept alive. `new Tally(options)`, or
 * `new Tally(url, options)` with `url` a URL or an array of them. Options:
 * - `url`: `ws://host:port/v1/ws` (default: the page's own hub); http(s) URLs work too.
 *   An array names several hubs of one cluster: the first is tried first,
 *   and every lost or failed connection moves to the next, round and round,
 *   the backoff growing per round over the list
 * - `token`: bearer token, sent in `hello` (never over plain ws:// to a host
 *   that is not loopback unless `insecure: true`)
 * - `client`: the name shown in the hub's logs (default "tally-js/1")
 * - `hello` (default true): say hello on connect; `reconnect` (default true)
 * - `initialDelayMs`, `maxDelayMs`: backoff bounds; `requestTimeoutMs` (default 15000)
 * - `WebSocket`: a WebSocket class (default: the global one)
 */
export class Tally {
  constructor(urlOrOptions = {}, more = {}) {
    const given = typeof urlOrOptions === "string" || Array.isArray(urlOrOptions) ? { ...more, url: urlOrOptions } : urlOrOptions;
    this.options = { client: "tally-js/1", hello: true, reconnect: true, initialDelayMs: 250, maxDelayMs: 15000,
      requestTimeoutMs: 15000, maxRetryAfterMs: 10000, insecure: false, ...given };
    const listed = [this.options.url ?? []].flat().filter((url) => url !== undefined && url !== null && url !== "");
    /** Every hub, normalized, each once, in the order they are tried. */
    this.urls = [...new Set((listed.length > 0 ? listed : [defaultURL()]).map(normalizeURL))];
    /** Which of `urls` the current (or next) connection is for. */
    this.hubIndex = 0;
    /** The hub connected to (or tried next). */
    this.url = this.urls[0];
    this.token = this.options.token ?? null;
    this.state = State.offline;
    this.user = null;
    this.role = null;
    this.server = null;
    /** The highest sequence number seen in a push or subscribe reply: where
     *  subscriptions resume from after a reconnect. */
    this.lastSeq = 0;
    this.socket = null;
    this.attempt = 0;
    this.nextId = 1;
    this.pending = []; //    sent, waiting for their reply (replies come in request order)
    this.queue = []; //      asked for while not live: sent once live
    this.subscriptions = new Set();
    this.listeners = new Map();
    this.timer = null;
    this.wanted = false; //  connect() was called and close() was not
    this.generation = 0; //  bumps per socket, so a stale socket's events are ignored
    this.onlineHandler = null;
  }

  // ---- events -------------------------------------------------------------

  /** `state` (state, detail), `message` (every decoded message, in order),
   *  `error` (TallyError), `hello` (the hello reply). Returns an unsubscriber. */
  on(event, listener) {
    if (!this.listeners.has(event)) this.listeners.set(event, new Set());
    this.listeners.get(event).add(listener);
    return () => this.listeners.get(event)?.delete(listener);
  }

  /** Calls `listener(state, detail)` now and at every state change. */
  onState(listener) {
    listener(this.state, {});
    return this.on("state", listener);
  }

  emit(event, ...args) {
    for (const listener of [...(this.listeners.get(event) || [])]) {
      try { listener(...args); } catch (error) { console.error(`tally: ${event} listener failed`, error); }
    }
  }

  setState(state, detail = {}) {
    if (this.state === state && !detail.force) return;
    this.state = state;
    this.emit("state", state, detail);
  }

  // ---- connection ---------------------------------------------------------

  /** Starts connecting (and keeps reconnecting). Resolves once live; rejects
   *  when the hub refuses the token or the URL would expose it. */
  connect() {
    // Every hub of the list: a failover must not send the token in clear either.
    const exposed = this.token && !this.options.insecure && this.urls.find((url) => url.startsWith("ws://") && !isLoopback(url));
    if (exposed) {
      const error = new TallyError("insecure", `refusing to send a token in clear text to ${new URL(exposed).host}: use https/wss, or insecure: true`);
      this.setState(State.offline, { error });
      return Promise.reject(error);
    }
    const ready = new Promise((resolve, reject) => {
      const off = this.on("state", (state, detail) => {
        if (state === State.live) { off(); resolve(this); }
        else if (state === State.offline && detail.fatal) { off(); reject(detail.error); }
      });
    });
    ready.catch(() => {}); // a caller that ignores the promise still sees the state
    if (!this.wanted) {
      this.wanted = true;
      this.attempt = 0;
      this.watchOnline();
      this.setState(State.connecting);
      this.open();
    }
    return this.state === State.live ? Promise.resolve(this) : ready;
  }

  /** Closes the connection and stops reconnecting; pending requests fail
   *  with `closed`. */
  close() {
    this.wanted = false;
    clearTimeout(this.timer);
    this.timer = null;
    this.unwatchOnline();
    const socket = this.socket;
    this.socket = null;
    this.generation += 1;
    if (socket) { try { socket.close(1000, "client closed"); } catch { /* already closed */ } }
    this.failPending(new TallyError("closed", "the client was closed"), true);
    this.setState(State.offline, { closed: true });
  }

  /** A new token (after a login): reconnects with it, to the same hub. */
  setToken(token) {
    this.token = token || null;
    if (this.wanted) { this.dropSocket(false, true); }
  }

  open() {
    const Impl = this.options.WebSocket || globalThis.WebSocket;
    if (!Impl) throw new Error("no WebSocket implementation: pass options.WebSocket");
    const generation = ++this.generation;
    for (const sub of this.subscriptions) { sub.active = false; sub.sending = false; sub.early = null; }
    let socket;
    try {
      socket = new Impl(this.url, "tally.v1");
    } catch (error) {
      this.scheduleReconnect({ error });
      return;
    }
    this.socket = socket;
    socket.onopen = () => { if (generation === this.generation) this.opened(); };
    socket.onmessage = (event) => { if (generation === this.generation) this.received(event.data); };
    socket.onclose = (event) => { if (generation === this.generation) this.lost({ code: event.code, reason: event.reason }); };
    socket.onerror = () => {
      // A failed connection is lost here: not every failure is followed by
      // onclose (Chromium's refusal by the page's Content-Security-Policy,
      // node 20's refused connect), and a later onclose is stale.
      if (generation === this.generation && socket.readyState !== 1) this.lost({ code: 1006, reason: "the connection failed" });
    };
  }

  async opened() {
    const generation = this.generation;
    const resuming = this.everLive === true;
    try {
      if (this.options.hello) {
        const hello = { op: "hello", protocol: PROTOCOL_VERSION, client: this.options.client };
        if (this.token) hello.token = this.token;
        const reply = await this.send(hello, { direct: true });
        this.user = reply.user ?? null;
        this.role = reply.role ?? null;
        this.server = reply.server ?? null;
        this.emit("hello", reply);
        // A restarted hub spreads out the resyncs of its returning clients.
        const wait = Math.min(Number(reply.retryAfterMs) || 0, this.options.maxRetryAfterMs);
        if (resuming && wait > 0) {
          this.setState(State.reconnecting, { retryAfterMs: wait, force: true });
          await new Promise((resolve) => setTimeout(resolve, wait));
          if (generation !== this.generation) return;
        }
      }
      // Subscriptions made meanwhile join the next round.
      for (let todo = this.inactive(); todo.length > 0; todo = this.inactive()) {
        await Promise.all(todo.map((sub) => this.resubscribe(sub)));
        if (generation !== this.generation) return;
      }
      this.attempt = 0;
      this.everLive = true;
      const queued = this.queue.splice(0);
      for (const item of queued) this.transmit(item);
      this.setState(State.live);
    } catch (error) {
      if (generation !== this.generation) return;
      if (error instanceof TallyError && error.code === "unauthorized") {
        this.wanted = false;
        this.dropSocket(true);
        this.failPending(error, true);
        this.emit("error", error);
        this.setState(State.offline, { error, fatal: true });
        return;
      }
      this.emit("error", error);
      this.dropSocket();
    }
  }

  inactive() {
    return [...this.subscriptions].filter((sub) => !sub.active && !sub.sending);
  }

  /** The socket closed or failed: fail what was in flight, retry later. */
  lost(detail) {
    this.socket = null;
    this.generation += 1;
    this.failPending(new TallyError("disconnected", `the connection to the hub was lost (${detail.code || "no code"}${detail.reason ? ": " + detail.reason : ""})`));
    if (!this.wanted || !this.options.reconnect) {
      this.wanted = false;
      this.failPending(new TallyError("closed", "the connection closed"), true);
      this.setState(State.offline, detail);
      return;
    }
    this.scheduleReconnect(detail);
  }

  /** Closes the socket and reconnects: to the next hub, unless `stay`. */
  dropSocket(quiet = false, stay = false) {
    const socket = this.socket;
    if (!socket) { if (this.wanted && !this.timer) this.scheduleReconnect({ stay }); return; }
    if (quiet) { this.socket = null; this.generation += 1; }
    try { socket.close(1000, "reconnecting"); } catch { /* gone */ }
    if (!quiet) this.lost({ code: 1000, reason: "reconnecting", stay });
  }

  scheduleReconnect(detail) {
    clearTimeout(this.timer);
    // The next hub of the list (the one after the hub lost or refused).
    if (!detail.stay && this.urls.length > 1) {
      this.hubIndex = (this.hubIndex + 1) % this.urls.length;
      this.url = this.urls[this.hubIndex];
    }
    if (this.offlineInBrowser()) { this.setState(State.offline, { ...detail, browserOffline: true }); return; }
    // The backoff grows per round over the list: a dead hub costs one
    // attempt before its neighbour is tried.
    const delay = backoffDelay(Math.floor(this.attempt / this.urls.length), this.options);
    this.attempt += 1;
    this.setState(this.everLive ? State.reconnecting : State.connecting,
      { ...detail, retryInMs: delay, attempt: this.attempt, url: this.url, force: true });
    this.timer = setTimeout(() => { this.timer = null; if (this.wanted) this.open(); }, delay);
  }

  offlineInBrowser() {
    return typeof navigator !== "undefined" && navigator.onLine === false;
  }

  watchOnline() {
    if (typeof addEventListener !== "function" || this.onlineHandler) return;
    this.onlineHandler = () => {
      if (this.wanted && !this.socket) { clearTimeout(this.timer); this.attempt = 0; this.open(); }
    };
    addEventListener("online", this.onlineHandler);
  }

  unwatchOnline() {
    if (this.onlineHandler) removeEventListener("online", this.onlineHandler);
    this.onlineHandler = null;
  }

  // ---- requests -----------------------------------------------------------

  /** Sends any protocol message and resolves with its `ok` reply (rejects
   *  with a TallyError otherwise). Without an `id` one is assigned. While
   *  not live the message waits for the connection; if the connection drops
   *  before the reply, a message with an `idem` key is sent again (the hub
   *  applies it once), any other fails with `disconnected`. */
  call(message, options = {}) {
    return this.send(message, options);
  }

  /** Sends a message exactly as given (no id added) and resolves with the
   *  reply, whatever it says: for conformance tests (Protocol/vectors). */
  callExact(message) {
    return this.send(message, { exact: true, raw: true });
  }

  /** Sends raw text as one frame; resolves with the reply whatever it says
   *  (for tests that send malformed input). */
  callText(text) {
    return this.send(null, { text, exact: true, raw: true });
  }

  send(message, { direct = false, raw = false, exact = false, text = null, timeoutMs = this.options.requestTimeoutMs } = {}) {
    return new Promise((resolve, reject) => {
      let body = message;
      if (body && body.id === undefined && !exact) body = { ...body, id: this.nextId++ };
      const item = { message: body, text: text ?? JSON.stringify(body), resolve, reject, raw, exact, timer: null };
      if (timeoutMs > 0) {
        item.timer = setTimeout(() => {
          this.queue = this.queue.filter((other) => other !== item);
          item.timedOut = true;
          reject(new TallyError("timeout", `no reply within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      if (direct || this.state === State.live) this.transmit(item);
      else if (!this.wanted) { clearTimeout(item.timer); reject(new TallyError("closed", "not connected: call connect() first")); }
      else this.queue.push(item);
    });
  }

  transmit(item) {
    if (!this.socket || this.socket.readyState !== 1) { this.queue.push(item); return; }
    this.pending.push(item);
    this.socket.send(item.text);
  }

  failPending(error, all = false) {
    const inFlight = this.pending.splice(0);
    for (const item of inFlight) {
      if (!all && item.message && item.message.idem !== undefined && item.message.op !== "hello" && !item.timedOut) {
        this.queue.push(item); // safe to repeat: the hub answers an idem key once
      } else {
        clearTimeout(item.timer);
        item.reject(error);
      }
    }
    if (all) {
      for (const item of this.queue.splice(0)) { clearTimeout(item.timer); item.reject(error); }
    }
  }

  received(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      this.emit("error", new TallyError("bad_json", "the hub sent a frame that is not JSON"));
      return;
    }
    this.emit("message", message, text);
    if (message === null || typeof message !== "object" || Array.isArray(message)) return;
    if (typeof message.op === "string") { this.push(message); return; }
    // A reply: replies come in request order, so it answers the oldest request.
    const item = this.pending.shift();
    if (!item) { this.emit("error", new TallyError("protocol", "a reply to no request")); return; }
    clearTimeout(item.timer);
    if (item.timedOut) return;
    const expected = item.message ? item.message.id : undefined;
    if (!item.exact && !sameJSON(message.id, expected)) {
      const error = new TallyError("protocol", `reply id ${JSON.stringify(message.id)} does not answer request id ${JSON.stringify(expected)}`);
      item.reject(error);
      this.emit("error", error);
      this.dropSocket();
      return;
    }
    if (item.raw || message.ok === true) item.resolve(message);
    else item.reject(TallyError.fromReply(message));
  }

  push(message) {
    if ((message.op === "change" || message.op === "query") && typeof message.seq === "number" && message.seq > this.lastSeq) this.lastSeq = message.seq;
    for (const sub of this.subscriptions) {
      if (sub.active || sub.paging) sub.deliver(message);
      // Its subscribe's reply may be in already, not yet handled (node's
      // WebSocket dispatches every message of a read at once, before the
      // reply's promise continues), or its later pages still loading.
      // Kept for `apply`, which delivers them once its state is in place.
      else if (sub.sending || sub.loading) (sub.early ??= []).push(message);
    }
  }

  // ---- reads --------------------------------------------------------------

  /** The record envelope `{name, version, seq, created, updated, data}`;
   *  with `{path}` the envelope has `value` instead of `data`. */
  get(name, { path } = {}) {
    return this.call(path === undefined ? { op: "get", name } : { op: "get", name, path });
  }

  /** The list envelope `{list, version, seq, entries}` with one page of
   *  entries (at most `limit`, default 10,000); when more follow it also has
   *  `more: true`, `count` and `cursor`: pass that `cursor` for the next page.
   *  A list subscription pages by itself. */
  getList(list, { cursor, limit } = {}) {
    const message = { op: "get", list };
    if (cursor !== undefined) message.cursor = cursor;
    if (limit !== undefined) message.limit = limit;
    return this.call(message);
  }

  /** One page `{seq, records, more}` of the records under `prefix`. */
  getPrefix(prefix, { after, limit } = {}) {
    const message = { op: "get", prefix };
    if (after !== undefined) message.after = after;
    if (limit !== undefined) message.limit = limit;
    return this.call(message);
  }

  /** The result `{seq, records, more}` of a live query (Protocol/PROTOCOL.md,
   *  "Live queries"): all of a limited one, a page of an unlimited one. */
  getQuery(query, { after, limit } = {}) {
    const message = { op: "get", query };
    if (after !== undefined) message.after = after;
    if (limit !== undefined) message.limit = limit;
    return this.call(message);
  }

  // ---- writes (each takes {version, idem}) ---------------------------------

  /** `options`: {version, idem}, and {checkStock: true} on an order's
   *  creation (refused with insufficient_stock when qty exceeds the stock). */
  set(name, data, options) { return this.call(withOptions({ op: "set", name, data }, options)); }
  setPath(name, path, value, options) { return this.call(withOptions({ op: "set", name, path, value }, options)); }
  merge(name, patch, options) { return this.call(withOptions({ op: "merge", name, data: patch }, options)); }
  delete(name, options) { return this.call(withOptions({ op: "delete", name }, options)); }
  deletePath(name, path, options) { return this.call(withOptions({ op: "delete", name, path }, options)); }
  increment(name, path, by = 1, options) { return this.call(withOptions({ op: "increment", name, path, by }, options)); }

  /** Moves a workflow record to another stage: `{from, to, reason, data, idem}`, all optional. */
  advance(name, { from, to, reason, data, idem } = {}) {
    return this.call(withOptions({ op: "advance", name }, { from, to, reason, data, idem }));
  }

  addEntry(list, entry, { at, ...options } = {}) { return this.call(withOptions({ op: "addEntry", list, entry }, { at, ...options })); }
  removeEntry(list, entry, { at, ...options } = {}) { return this.call(withOptions({ op: "removeEntry", list, entry }, { at, ...options })); }
  setEntries(list, entries, options) { return this.call(withOptions({ op: "setEntries", list, entries }, options)); }
  deleteList(list, options) { return this.call(withOptions({ op: "delete", list }, options)); }

  /** Several writes as one atomic change set: `ops` are messages without id. */
  write(ops, options) { return this.call(withOptions({ op: "write", ops }, options)); }

  /** Settles a mirror's conflict (`conflicts/<id>`, its envelope) by keeping
   *  one side, `"local"` or `"hub"`, in one atomic write (see conflicts.js);
   *  `keep`: fields a whole-record set leaves to the hub. Refused with
   *  `conflict` when the conflict changed meanwhile (settled elsewhere). */
  resolveConflict(conflict, take, { keep, idem = Tally.idem() } = {}) {
    return this.write(conflictResolution(conflict, take, { keep }), { idem });
  }

  /** Publishes an event (not stored); resolves with `{delivered}`. */
  publish(topic, data) { return this.call({ op: "publish", topic, data }); }

  /** A fresh idempotency key for a write that may be retried. */
  static idem() {
    return globalThis.crypto?.randomUUID ? crypto.randomUUID() : `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
  }

  // ---- subscriptions ------------------------------------------------------

  /**
   * Subscribes to one target and keeps its state current:
   * - `{name}`: `listener(envelope | null, change)` — the record
   * - `{name, path}`: `listener(value | undefined, change)` — one value in it
   * - `{list}`: `listener(envelope | null, change)` — `envelope.entries`
   * - `{prefix}`: `listener(Map name → envelope, change)` — every record under it
   * - `{topic}`: `listener(data, event)` — events
   * - `{query}`: `listener(Map name → envelope, changes)` — a live query's
   *   result; `changes` is `{seq, entered, changed, left}` (names), null for
   *   the first snapshot; a resume reports what changed while away.
   * `change` is null for a snapshot (with `resnapshot: true` in
   * `subscription.lastSnapshot` when the hub could not resume). Returns a
   * Subscription: `ready` (a promise), `value`, `unsubscribe()`.
   */
  subscribe(target, listener) {
    const sub = new Subscription(this, target, listener);
    this.subscriptions.add(sub);
    if (this.state === State.live) sub.ready = this.resubscribe(sub);
    else sub.ready = new Promise((resolve, reject) => { sub.waiting = { resolve, reject }; });
    sub.ready.catch(() => {});
    return sub;
  }

  /** `subscribe({name}, listener)` */
  record(name, listener) { return this.subscribe({ name }, listener); }
  /** `subscribe({prefix}, listener)` */
  prefix(prefix, listener) { return this.subscribe({ prefix }, listener); }
  /** `subscribe({query}, listener)`: e.g. `{prefix: "orders/", where: {stage: ["ready"]}}`. */
  query(query, listener) { return this.subscribe({ query }, listener); }
  /** `subscribe({list}, listener)` */
  list(list, listener) { return this.subscribe({ list }, listener); }
  /** `subscribe({topic}, listener)` */
  topic(topic, listener) { return this.subscribe({ topic }, listener); }

  /** Sends the subscribe for `sub`: with `since` when it has state (a
   *  resume), as a snapshot otherwise. */
  async resubscribe(sub) {
    const message = { op: "subscribe", ...sub.target };
    const resuming = sub.hasState && !sub.target.topic;
    if (resuming) message.since = Math.max(sub.seq, this.lastSeq);
    sub.active = false;
    sub.sending = true;
    try {
      const reply = await this.send(message, { direct: true });
      sub.sending = false;
      if (typeof reply.seq === "number" && reply.seq > this.lastSeq) this.lastSeq = reply.seq;
      await sub.apply(reply);
      if (sub.waiting) { sub.waiting.resolve(sub); sub.waiting = null; }
      return sub;
    } catch (error) {
      sub.sending = false;
      sub.early = null;
      // The hub's "not now" (unavailable, storage_failed…) fails the round:
      // the connection is dropped and the subscription sent again on the
      // next one, like a lost connection.
      if (error instanceof TallyError && !["disconnected", "closed", "timeout", ...HUB_NOT_NOW].includes(error.code)) {
        // The hub refused it (forbidden, bad_name…): retrying will not help.
        this.subscriptions.delete(sub);
        sub.failed = error;
        if (sub.waiting) { sub.waiting.reject(error); sub.waiting = null; }
        this.emit("error", error);
        return sub;
      }
      throw error;
    }
  }
}

function withOptions(message, options = {}) {
  for (const [key, value] of Object.entries(options || {})) {
    if (value !== undefined) message[key] = value;
  }
  return message;
}

function normalizeURL(url) {
  let text = String(url);
  if (text.startsWith("http://")) text = "ws://" + text.slice(7);
  if (text.startsWith("https://")) text = "wss://" + text.slice(8);
  const parsed = new URL(text);
  if (parsed.pathname === "/" || parsed.pathname === "") parsed.pathname = "/v1/ws";
  return parsed.toString();
}

function sameJSON(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}
