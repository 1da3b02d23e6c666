// One subscription of a `Tally` client and the state it keeps: a record,
// one value in it, a list, every record under a prefix, a live query's
// result, or a topic's events.

import { parsePath, clone } from "./path.js";
import { applyRecordChange, applyListChange, applyPathChange } from "./changes.js";

const LIVE = "live";

/** One subscription and the state it keeps (see `Tally.subscribe`). */
export class Subscription {
  constructor(client, target, listener) {
    const keys = ["name", "list", "prefix", "topic", "query"].filter((key) => target[key] !== undefined);
    if (keys.length !== 1) throw new TypeError("subscribe to exactly one of name, list, prefix, topic, query");
    if (target.path !== undefined && target.name === undefined) throw new TypeError("a path goes with a name");
    this.client = client;
    this.target = { ...target };
    this.kind = target.query !== undefined ? "query" : target.topic !== undefined ? "topic" : target.prefix !== undefined ? "prefix"
      : target.list !== undefined ? "list" : target.path !== undefined ? "path" : "record";
    this.pathSegments = this.kind === "path" ? parsePath(target.path) : null;
    this.listener = listener || (() => {});
    this.seq = 0;
    this.hasState = false;
    this.active = false;
    this.value = this.kind === "prefix" || this.kind === "query" ? new Map() : this.kind === "path" ? undefined : null;
    this.queryId = null; // the hub's id for a query (its pushes carry it)
    this.lastSnapshot = null;
  }

  async unsubscribe() {
    if (!this.client.subscriptions.delete(this)) return;
    this.active = false;
    if (this.client.state === LIVE) {
      try { await this.client.call({ op: "unsubscribe", ...this.target }); } catch { /* gone with the connection */ }
    }
  }

  notify(change) {
    try { this.listener(this.value, change, this); } catch (error) { console.error("tally: subscription listener failed", error); }
  }

  /** Delivers the pushes that came in behind the subscribe's reply
   *  before it was handled (`Tally.push`), once the reply's state is in
   *  place: those the reply already holds are skipped by their seq. */
  deliverEarly() {
    const early = this.early;
    this.early = null;
    for (const message of early || []) this.deliver(message);
  }

  /** Applies a subscribe reply: a snapshot or the changes since. */
  async apply(reply) {
    if (this.kind === "topic") { this.active = true; this.deliverEarly(); return; }
    if (Array.isArray(reply.changes)) {
      this.active = true;
      for (const change of reply.changes) this.deliver(change);
      this.seq = Math.max(this.seq, reply.seq);
      this.deliverEarly();
      return;
    }
    let paged = false; // a long list's pages moved `seq` on with the pushes applied meanwhile
    switch (this.kind) {
      case "record": this.value = reply.record ?? null; break;
      case "path": this.value = reply.record ? clone(reply.record.value) : undefined; this.envelope = reply.record ?? null; break;
      case "list":
        this.value = reply.list ?? null;
        if (this.value?.more) { await this.pageList(reply.seq); paged = true; }
        break;
      case "prefix":
        this.value = await this.pageRecords(reply, { prefix: this.target.prefix });
        break;
      case "query": {
        if (reply.delta === true) { // a resume: what changed while away
          const set = { seq: reply.seq, entered: [], changed: [], left: [] };
          for (const record of reply.records || []) {
            (this.value.has(record.name) ? set.changed : set.entered).push(record.name);
            this.value.set(record.name, record);
          }
          for (const name of reply.left || []) if (this.value.delete(name)) set.left.push(name);
          this.queryId = reply.query;
          this.seq = Math.max(this.seq, reply.seq);
          this.active = true;
          this.lastSnapshot = { seq: reply.seq, resnapshot: false };
          if (set.entered.length || set.changed.length || set.left.length) this.notify(set);
          this.deliverEarly();
          return;
        }
        const records = await this.pageRecords(reply, { query: this.target.query });
        const previous = this.value;
        this.queryId = reply.query;
        this.value = records;
        this.seq = reply.seq;
        this.active = true;
        this.lastSnapshot = { seq: reply.seq, resnapshot: reply.resnapshot === true };
        if (this.hasState) { // a resume: what changed while away, as one change set
          this.notify(querySetChanges(previous, records, reply.seq));
        } else {
          this.hasState = true;
          this.notify(null);
        }
        this.deliverEarly();
        return;
      }
    }
    if (!paged) this.seq = reply.seq;
    this.hasState = true;
    this.active = true;
    this.lastSnapshot = { seq: reply.seq, resnapshot: reply.resnapshot === true };
    this.notify(null);
    this.deliverEarly();
  }

  /** Loads the rest of a list longer than one page (PROTOCOL.md, "Paging a
   *  list"): page by page after the previous page's cursor. Pushes that
   *  arrive meanwhile are applied to the part already loaded (`deliver`);
   *  the hub answers a connection in order, so every page starts where the
   *  pushes before it left the list, and nothing is lost or counted twice.
   *  When that cannot be told (an entry added right after the loaded ones
   *  once the cursor's entry was removed), it starts again from the first page. */
  async pageList(seq) {
    this.seq = seq;
    this.paging = { loaded: this.value.entries.length, cursor: this.value.cursor };
    this.deliverEarly(); // they came after the first page, as pushes while paging do
    try {
      while (this.paging?.cursor) {
        const restart = this.paging.restart === true;
        const request = { op: "get", list: this.target.list };
        if (!restart) request.cursor = this.paging.cursor;
        const page = await this.client.send(request, { direct: true });
        if (!this.paging) break; // a setEntries or delete replaced the list meanwhile
        if (restart) {
          this.value = { list: page.list, version: page.version, seq: page.seq, created: page.created,
            updated: page.updated, entries: page.entries };
          this.paging = { loaded: page.entries.length, cursor: page.more ? page.cursor : null };
          continue;
        }
        if (this.paging.restart) continue; // this page may have missed an entry: ask again from the first
        this.value.entries.push(...page.entries);
        this.paging.loaded += page.entries.length;
        this.paging.cursor = page.more ? page.cursor : null;
      }
    } catch (error) {
      if (this.paging) throw error; // else: the list went away meanwhile
    } finally {
      this.paging = null;
      if (this.value) { delete this.value.more; delete this.value.cursor; delete this.value.count; }
    }
  }

  /** A snapshot's records and, while `more`, the pages after it (`get`
   *  with `target`: a prefix, or an unlimited query), keeping the newer
   *  copy of each record. Sent at once: this runs while the client
   *  resyncs, before it is live. */
  async pageRecords(reply, target) {
    const records = new Map((reply.records || []).map((record) => [record.name, record]));
    let more = reply.more === true;
    let after = reply.records?.length ? reply.records[reply.records.length - 1].name : undefined;
    // Pushes meanwhile may change records of a page already read: kept
    // (`Tally.push`) and delivered in order once the result is in place.
    this.loading = more;
    try {
      while (more) {
        const page = await this.client.send({ op: "get", ...target, after, limit: 1000 }, { direct: true });
        for (const record of page.records) {
          const known = records.get(record.name);
          if (!known || known.seq < record.seq) records.set(record.name, record);
        }
        more = page.more === true && page.records.length > 0;
        after = page.records.length ? page.records[page.records.length - 1].name : after;
      }
    } finally {
      this.loading = false;
    }
    return records;
  }

  /** A push (or a change replayed in a subscribe reply), if it is ours. */
  deliver(change) {
    if (change.op === "event") {
      if (this.kind === "topic" && change.topic === this.target.topic) this.listener(change.data, change, this);
      return;
    }
    if (change.op === "query") {
      if (this.kind !== "query" || change.query !== this.queryId || !(change.seq > this.seq)) return;
      const set = { seq: change.seq, entered: [], changed: [], left: [] };
      for (const record of change.entered || []) { this.value.set(record.name, record); set.entered.push(record.name); }
      for (const record of change.changed || []) { this.value.set(record.name, record); set.changed.push(record.name); }
      for (const name of change.left || []) { this.value.delete(name); set.left.push(name); }
      this.seq = change.seq;
      this.notify(set);
      return;
    }
    if (change.op !== "change" || typeof change.seq !== "number") return;
    if (change.seq <= this.seq) return; // already in our snapshot
    let applies = false;
    if (change.list !== undefined) {
      if (this.kind === "list" && change.list === this.target.list) {
        this.value = applyListChange(this.value, change, this.paging);
        if (change.kind === "setEntries" || change.kind === "delete") this.paging = null;
        applies = true;
      }
    } else if (change.name !== undefined) {
      if (this.kind === "record" && change.name === this.target.name) {
        this.value = applyRecordChange(this.value, change); applies = true;
      } else if (this.kind === "prefix" && change.name.startsWith(this.target.prefix)) {
        const next = applyRecordChange(this.value.get(change.name) ?? null, change);
        if (next) this.value.set(change.name, next); else this.value.delete(change.name);
        applies = true;
      } else if (this.kind === "path" && change.name === this.target.name) {
        this.value = applyPathChange(this.value, this.pathSegments, change); applies = true;
      }
    }
    if (!applies) return;
    this.seq = change.seq;
    this.hasState = true;
    if (this.active) this.notify(change);
  }
}

/** The change set between two results of a query (a resume's fresh one). */
function querySetChanges(before, after, seq) {
  const set = { seq, entered: [], changed: [], left: [] };
  for (const [name, record] of after) {
    const old = before.get(name);
    if (!old) set.entered.push(name);
    else if (old.version !== record.version || old.seq !== record.seq) set.changed.push(name);
  }
  for (const name of before.keys()) if (!after.has(name)) set.left.push(name);
  return set;
}
