// The stock-room board: open orders and intake jobs moving through their
// stages, live stats, the offline mirrors' open conflicts (conflicts.js), a
// connection indicator and a token login. Everything
// comes from subscriptions of the JS client (/js/tally.js); a change is
// applied to its card the moment its push arrives, without a reload.
//
// What the board loads does not grow with history: live queries for the open
// records and the few that finished last (never the whole orders/ prefix),
// and one record subscription per item a card shows (never items/).
//
// Query parameters: ?linger=SECONDS (how long delivered and cancelled
// orders, done and failed jobs stay; default 30).

import { startCounter } from "./counter.js";
import { Tally, State, TallyError, defaultURL } from "/js/tally.js";
import { $, el, duration, isSHA, morph, photoSetter, progressSteps, stageBefore, stageSince as stageSinceIn } from "./ui.js";
import { followConflicts } from "./conflicts.js";
import { createTiming } from "./timing.js";

const params = new URLSearchParams(location.search);
const LINGER_MS = Math.max(0, Number(params.get("linger") ?? 30)) * 1000;
/** How many finished records per board the "recently finished" query keeps. */
const RECENT = 20;
const TOKEN_KEY = "tally.token";
/** How long a card whose record left one query waits for another to take it. */
const LEAVE_GRACE_MS = 300;

// The shipped workflows; replaced by the hub's own (GET /v1/workflows) once read.
let ORDER_TRACK = ["received", "in-progress", "ready", "delivered"];
let ORDER_STAGES = [...ORDER_TRACK, "cancelled"];
let ORDER_TERMINAL = new Set(["delivered", "cancelled"]);
let ORDER_NEXT = { received: "in-progress", "in-progress": "ready", ready: "delivered" };
let INTAKE_TRACK = ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done"];
let INTAKE_STAGES = [...INTAKE_TRACK, "failed"];
let INTAKE_TERMINAL = new Set(["done", "failed"]);
/** Workflow prefix → its stage field: settling a whole-record conflict
 *  leaves the stage, history and owner as the hub has them (they move by advance). */
let STAGE_FIELDS = new Map([["orders/", "stage"], ["intake/", "stage"]]);
const keepFor = (name) => {
  for (const [prefix, field] of STAGE_FIELDS) if (name.startsWith(prefix)) return [field, "history", "owner"];
  return [];
};
const ACTIONS = { "in-progress": "Start", ready: "Mark ready", delivered: "Deliver" };
const LABELS = { "in-progress": "In progress", "media-uploaded": "Photos uploaded", "cover-set": "Cover set" };
const label = (stage) => LABELS[stage] ?? (stage ? stage[0].toUpperCase() + stage.slice(1) : "—");
/** Roles that only look: they get no buttons (the hub would refuse them anyway). */
const VIEW_ONLY_ROLES = new Set(["dashboard", "client"]);

/** The hubs the board goes round: the one that served this page first, then
 *  its peers (GET /v1/hubs: the other hubs of its cluster, which share its
 *  seqs), each once. A hub that does not list them (an older one) or does
 *  not answer within 2 s leaves the board with its own alone. */
async function hubList() {
  const own = defaultURL();
  try {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 2000);
    const response = await fetch("/v1/hubs", { signal: controller.signal });
    clearTimeout(timer);
    const body = response.ok ? await response.json() : null;
    const peers = Array.isArray(body?.hubs) ? body.hubs.filter((url) => typeof url === "string" && url !== "") : [];
    return [...new Set([own, ...peers])];
  } catch {
    return [own];
  }
}

const CLIENT = "tally-board/1";
const hub = new Tally(await hubList(), { token: localStorage.getItem(TOKEN_KEY) || undefined, client: CLIENT });
window.tallyBoard = { hub }; // for the console and for tests

const orders = new Map(); // name → envelope
const jobs = new Map();
const items = new Map();
const cards = new Map(); // name → card element
let clockOffset = null; // browser clock − hub clock, from pushes (smallest seen)

// ---- formatting -------------------------------------------------------------

const hubNow = () => Date.now() - (clockOffset ?? 0);
const stageSince = (envelope) => stageSinceIn(envelope, hubNow);
const itemName = (name) => items.get(name)?.data?.name ?? (typeof name === "string" ? name.replace(/^items\//, "") : "?");

// ---- photos: plain URLs on an open hub, fetched with the token otherwise ----

const setPhoto = photoSetter(hub);
function thumb(sha, alt) {
  const img = el("img", { alt, loading: "lazy", decoding: "async", width: 84, height: 63 });
  setPhoto(img, sha);
  return img;
}

// ---- cards -------------------------------------------------------------------

const canAct = () => hub.role !== null && !VIEW_ONLY_ROLES.has(hub.role);
const terminalFor = (name) => (name.startsWith("orders/") ? ORDER_TERMINAL : INTAKE_TERMINAL);
/** Whether a terminal record has stayed its while and should leave. */
function expired(envelope) {
  const stage = envelope.data?.stage;
  return terminalFor(envelope.name).has(stage) && hubNow() - stageSince(envelope) > LINGER_MS;
}

const progressBar = (track, stage, before, what) => progressSteps(track, stage, before, what, label);

function orderCard(envelope) {
  const data = envelope.data ?? {};
  const stage = data.stage;
  const item = items.get(data.item);
  const short = envelope.name.slice("orders/".length);
  const next = ORDER_NEXT[stage] ? [ORDER_NEXT[stage], ACTIONS[ORDER_NEXT[stage]] ?? `To ${label(ORDER_NEXT[stage]).toLowerCase()}`] : null;
  const card = el("article", {
    class: "card order", "data-record": envelope.name, "data-stage": stage, "data-version": envelope.version,
    "data-terminal": String(ORDER_TERMINAL.has(stage)), "aria-labelledby": `title-${envelope.name}`,
  },
    el("h3", { id: `title-${envelope.name}` },
      el("span", { class: "item" }, itemName(data.item)),
      el("span", { class: "qty", title: data.kind === "receive" ? "coming in" : "going out" },
        `${data.kind === "receive" ? "+" : "×"} ${data.qty ?? "?"}`)),
    progressBar(ORDER_TRACK, stage, stageBefore(envelope), `Order ${short}`),
    el("div", { class: "meta" },
      el("span", { class: "stage" }, label(stage)),
      el("span", { class: "since", "data-since": stageSince(envelope) }, duration(hubNow() - stageSince(envelope))),
      el("span", { class: "name" }, short),
      item && typeof item.data?.stock === "number" ? el("span", { class: "stock" }, `stock ${item.data.stock}`) : null),
  );
  if (isSHA(item?.data?.cover)) {
    card.classList.add("has-photo");
    card.prepend(el("div", { class: "thumbs order-photo" }, thumb(item.data.cover, "")));
  }
  if (next || (!ORDER_TERMINAL.has(stage) && stage)) {
    const buttons = el("div", { class: "buttons", hidden: !canAct() });
    if (next) {
      buttons.append(el("button", { type: "button", class: "advance", "data-to": next[0],
        "aria-label": `${next[1]}: order ${short} (${itemName(data.item)})`, onclick: pressAdvance }, next[1]));
    }
    buttons.append(el("button", { type: "button", class: "cancel danger", "aria-label": `Cancel order ${short}`,
      onclick: pressCancel }, "Cancel"));
    card.append(buttons);
  }
  card.append(el("p", { class: "error", role: "alert", hidden: true }));
  return card;
}

/** Button handlers read the record, its stage and the target from the card
 *  as it is now: a card is updated in place, its buttons outlive a change. */
function pressAdvance(event) {
  const button = event.currentTarget;
  const card = button.closest(".card");
  act(card.dataset.record, card.dataset.stage, button.dataset.to, card);
}
function pressCancel(event) {
  const card = event.currentTarget.closest(".card");
  confirmCancel(event.currentTarget, card.dataset.record, card.dataset.stage, card);
}

/** An intake job's title: its item's name once the item has one, else the
 *  code it was scanned with, else "New item" (an item the job is still to
 *  create) — never the job's own id, which is shown small, as an order's is. */
function jobTitle(data) {
  const name = items.get(data.item)?.data?.name;
  if (typeof name === "string" && name) return name;
  if (typeof data.code === "string" && data.code) return data.code;
  return data.item ? "New item" : "Intake job";
}

const strings = (value) => (Array.isArray(value) ? value.filter((entry) => typeof entry === "string" && entry) : []);

/** What the hub's analysis of a job's photos found (`data.analysis`): the
 *  codes with their symbology and what they resolve to (an item, or "new"),
 *  the proposals for the item and whether the owner accepted them. */
function analysisView(analysis, short) {
  if (!analysis || typeof analysis !== "object" || Array.isArray(analysis)) return null;
  const status = typeof analysis.status === "string" ? analysis.status : "done";
  const codes = Array.isArray(analysis.codes) ? analysis.codes.filter((code) => typeof code?.code === "string") : [];
  const proposals = analysis.proposals && typeof analysis.proposals === "object" ? analysis.proposals : {};
  const serials = strings(proposals.serials), otherCodes = strings(proposals.codes);
  const name = typeof proposals.name === "string" && proposals.name ? proposals.name : null;
  const accepted = analysis.accepted && typeof analysis.accepted === "object" ? analysis.accepted : null;
  const proposed = serials.length > 0 || otherCodes.length > 0 || name !== null;
  const found = codes.length ? `${codes.length} code${codes.length === 1 ? "" : "s"} found` : "no codes found";
  const summary = status === "done" ? found
    : `Analysis ${status}${typeof analysis.reason === "string" && analysis.reason ? `: ${analysis.reason}` : ""}`;
  const proposal = (term, values) => [el("dt", { class: term.toLowerCase() }, term),
    el("dd", { class: term.toLowerCase() }, ...values.map((value) => el("code", {}, value)))];
  return el("section", { class: "analysis", "data-status": status, "data-accepted": String(accepted !== null),
    "aria-label": `Photo analysis of ${short}` },
    el("p", { class: "summary" }, summary,
      typeof analysis.millis === "number" ? el("span", { class: "millis" }, ` · ${analysis.millis < 1000
        ? `${Math.round(analysis.millis)} ms` : duration(analysis.millis)}`) : null),
    codes.length ? el("ul", { class: "codes", "aria-label": "Codes in the photos" }, ...codes.slice(0, 12).map((code) =>
      el("li", { class: "code", "data-found": String(code.found === true) },
        el("span", { class: "symbology" }, typeof code.symbology === "string" ? code.symbology : "code"),
        el("code", { class: "value" }, code.code),
        el("span", { class: "resolved" }, code.found === true
          ? `→ ${itemName(code.name)}`
          : `new${typeof code.name === "string" ? ` (${code.name.replace(/^items\//, "")})` : ""}`)))) : null,
    proposed ? el("dl", { class: "proposals" },
      ...(serials.length ? proposal("Serials", serials) : []),
      ...(otherCodes.length ? proposal("Codes", otherCodes) : []),
      ...(name ? proposal("Name", [name]) : [])) : null,
    proposed ? el("p", { class: "acceptance" }, accepted
      ? `Accepted${typeof accepted.by === "string" ? ` by ${accepted.by}` : ""}`
      : `Proposed, not accepted yet (tally intake accept ${short})`) : null);
}

function jobCard(envelope) {
  const data = envelope.data ?? {};
  const stage = data.stage;
  const short = envelope.name.slice("intake/".length);
  const photos = Array.isArray(data.photos) ? data.photos.filter(isSHA) : [];
  const failure = stage === "failed"
    ? (data.history?.[data.history.length - 1]?.reason ?? data.reason ?? "failed") : null;
  const steps = progressBar(INTAKE_TRACK, stage, stageBefore(envelope), `Intake ${short}`);
  const analysisStatus = typeof data.analysis?.status === "string" ? data.analysis.status : null;
  const analyzedStep = steps.querySelector('li[data-step="analyzed"]');
  if (analyzedStep && analysisStatus) {
    analyzedStep.dataset.analysis = analysisStatus;
    analyzedStep.title = `Analysis ${analysisStatus}`;
  }
  return el("article", {
    class: "card job", "data-record": envelope.name, "data-stage": stage, "data-version": envelope.version,
    "data-terminal": String(INTAKE_TERMINAL.has(stage)), "aria-labelledby": `title-${envelope.name}`,
  },
    el("h3", { id: `title-${envelope.name}` }, el("span", { class: "item" }, jobTitle(data)),
      el("span", { class: "qty" }, photos.length ? `${photos.length} photo${photos.length === 1 ? "" : "s"}` : "")),
    steps,
    el("div", { class: "meta" },
      el("span", { class: "stage" }, label(stage)),
      el("span", { class: "since", "data-since": stageSince(envelope) }, duration(hubNow() - stageSince(envelope))),
      data.location ? el("span", { class: "location" }, String(data.location)) : null,
      el("span", { class: "name" }, short)),
    failure ? el("p", { class: "reason" }, `Failed: ${failure}`) : null,
    analysisView(data.analysis, short),
    photos.length ? el("div", { class: "thumbs" }, ...photos.slice(0, 12).map((sha, i) => thumb(sha, `Photo ${i + 1} of ${photos.length}, ${short}`))) : null,
  );
}

/** Puts a record's card on its board (replacing the old one in place, so
 *  the order of cards and the keyboard focus stay), or takes it away. */
function place(envelope, board, make, { flash = false } = {}) {
  const old = cards.get(envelope?.name);
  if (!envelope || !envelope.data || expired(envelope)) {
    if (old) { old.remove(); cards.delete(old.dataset.record); }
    updateEmpty();
    return;
  }
  // Keep the keyboard where it was: on the same button of the new card (a
  // button that was pressed is disabled meanwhile, which drops the focus).
  const lost = document.activeElement === document.body || document.activeElement === null;
  const focused = old?.contains(document.activeElement) ? document.activeElement.className.split(" ")[0]
    : lost ? old?.dataset.refocus ?? null : null;
  const fresh = make(envelope);
  // Open records first, oldest first; finished ones after them, in the
  // order they finished, until they leave.
  const finished = terminalFor(envelope.name).has(envelope.data.stage);
  fresh.dataset.order = `${finished ? 1 : 0}:${String(finished ? stageSince(envelope) : envelope.created ?? 0).padStart(15, "0")}:${envelope.name}`;
  if (old?.dataset.refocus) fresh.dataset.refocus = old.dataset.refocus;
  // The card stays the same element, updated where it changed: a push that
  // changes nothing it shows (its item's stock elsewhere, a field it does
  // not show) changes nothing in the page, and a press lands.
  // Within one stage, what a press started stays: an armed Cancel, a
  // button disabled while its advance is on its way, an error shown.
  let card = fresh;
  const previousOrder = old?.dataset.order;
  if (old) {
    const sameStage = old.dataset.stage === fresh.dataset.stage;
    card = morph(old, fresh, (node) => sameStage && (node.dataset?.armed === "true" || node.disabled === true
      || (node.classList?.contains("error") && !node.hidden)));
  }
  if (!old || previousOrder !== card.dataset.order || card.parentNode !== board) {
    const after = [...board.querySelectorAll(".card")].find((other) => other !== card && other.dataset.order > card.dataset.order);
    if (card.nextElementSibling !== after || card.parentNode !== board) board.insertBefore(card, after ?? null);
  }
  cards.set(envelope.name, card);
  if (focused && !card.contains(document.activeElement)) (card.querySelector(`.${focused}`) ?? card.querySelector("button"))?.focus();
  if (flash) { card.classList.add("flash"); setTimeout(() => card.classList.remove("flash"), 900); }
  updateEmpty();
}

function updateEmpty() {
  $("orders-empty").hidden = $("order-board").querySelector(".card") !== null;
  $("intake-empty").hidden = $("intake-board").querySelector(".card") !== null;
}

function renderAll(map, board, make) {
  for (const [name, card] of cards) {
    if (board.contains(card) && !map.has(name)) { card.remove(); cards.delete(name); }
  }
  for (const envelope of map.values()) place(envelope, board, make);
}

// ---- actions ------------------------------------------------------------------

async function act(name, from, to, card, reason) {
  const buttons = card.querySelectorAll("button");
  const error = card.querySelector(".error");
  if (card.contains(document.activeElement)) card.dataset.refocus = document.activeElement.className.split(" ")[0];
  buttons.forEach((button) => { button.disabled = true; });
  error.hidden = true;
  try {
    await hub.advance(name, { from, to, reason, idem: Tally.idem() });
    // The push redraws the card; nothing else to do.
  } catch (failure) {
    error.textContent = failure instanceof TallyError && failure.code === "conflict"
      ? `Someone moved it first (now ${label(failure.details.stage)}).`
      : failure.code === "insufficient_stock"
        ? `Not enough stock: ${failure.details.stock} in stock, ${failure.details.needed} needed.`
        : `${failure.message}${failure.code ? ` (${failure.code})` : ""}`;
    error.hidden = false;
    buttons.forEach((button) => { button.disabled = false; });
    if (card.dataset.refocus && document.activeElement === document.body) card.querySelector(`.${card.dataset.refocus}`)?.focus();
  }
}

/** Cancel asks once more: the first press arms it for five seconds. */
function confirmCancel(button, name, stage, card) {
  if (button.dataset.armed === "true") { act(name, stage, "cancelled", card); return; }
  button.dataset.armed = "true";
  button.textContent = "Confirm cancel";
  setTimeout(() => { if (button.isConnected) { button.dataset.armed = "false"; button.textContent = "Cancel"; } }, 5000);
}

// ---- stats --------------------------------------------------------------------

// Counts, waits per stage and finished per hour: timing.js draws them.
const timing = {
  "order-stats": createTiming($("order-stats"), { label, now: hubNow, noun: "orders" }),
  "intake-stats": createTiming($("intake-stats"), { label, now: hubNow, noun: "jobs" }),
};
function renderStats(target, stages, envelope) {
  timing[target].show(stages, target === "order-stats" ? ORDER_TERMINAL : INTAKE_TERMINAL, envelope?.data);
}

// ---- connection, login ------------------------------------------------------------

const STATE_LABELS = { [State.live]: "Live", [State.connecting]: "Connecting…", [State.reconnecting]: "Reconnecting…", [State.offline]: "Offline" };

hub.onState((state, detail) => {
  const badge = $("connection");
  badge.dataset.state = state;
  badge.querySelector(".label").textContent = STATE_LABELS[state] ?? state;
  // Which hub of the cluster it is on (or tries next).
  badge.dataset.hub = hub.url;
  const where = hub.urls.length > 1 ? new URL(hub.url).host : null;
  badge.title = detail.retryInMs !== undefined ? `next try${where ? ` (${where})` : ""} in ${(detail.retryInMs / 1000).toFixed(1)} s`
    : state === State.live && where ? `connected to ${where}` : "";
  document.body.dataset.connection = state;
  if (state === State.live && !$("notice").textContent.startsWith("This token's role")) notice(null);
  if (detail.error?.code === "unauthorized") openLogin(hub.token ? "The hub did not accept this token." : "This hub needs a token.");
  else if (detail.error?.code === "insecure") notice(detail.error.message);
});

hub.on("hello", () => {
  $("who").textContent = whoLabel();
  for (const card of cards.values()) card.querySelector(".buttons")?.toggleAttribute("hidden", !canAct());
});

hub.on("message", (message) => {
  if ((message.op === "change" || message.op === "query") && typeof message.time === "number") {
    const offset = Date.now() - message.time;
    clockOffset = clockOffset === null ? offset : Math.min(clockOffset, offset);
  }
});

hub.on("error", (error) => {
  if (error?.code === "forbidden") {
    notice(`This token's role (${hub.role}) may not see everything here: ${error.message}`
      + (hub.role === "client" ? " Your own orders are under “My orders”." : ""));
  }
});

/** Who the board acts as, in words: the user and role on a hub with users;
 *  on an open hub (which names a connection after its hello's client, here
 *  "tally-board/1") "open hub · admin". */
function whoLabel() {
  if (!hub.user) return "";
  const open = hub.user === CLIENT || (hub.user === "anonymous" && !hub.token);
  return open ? `open hub · ${hub.role}` : `${hub.user} · ${hub.role}`;
}

function notice(text) {
  $("notice").textContent = text ?? "";
  $("notice").hidden = !text;
}

function openLogin(reason) {
  $("login-reason").textContent = reason ?? "Paste your token. It is kept in this browser only.";
  $("token").value = "";
  if (!$("login").open) $("login").showModal();
}

$("login-button").addEventListener("click", () => openLogin());
$("login").addEventListener("close", () => {
  const choice = $("login").returnValue;
  if (choice === "save" && $("token").value.trim()) {
    localStorage.setItem(TOKEN_KEY, $("token").value.trim());
  } else if (choice === "clear") {
    localStorage.removeItem(TOKEN_KEY);
  } else {
    return;
  }
  setPhoto.forget();
  notice(null);
  hub.setToken(localStorage.getItem(TOKEN_KEY) || null);
  hub.connect().catch(() => {});
});

/** Reads the hub's workflows, so a config that renames or adds stages
 *  shows on the board: the track is every stage that is not terminal, then
 *  the first terminal one (delivered, done); the others are side exits. */
async function readWorkflows() {
  try {
    const response = await fetch("/v1/workflows", hub.token ? { headers: { Authorization: `Bearer ${hub.token}` } } : {});
    if (!response.ok) return;
    const { workflows } = await response.json();
    STAGE_FIELDS = new Map((workflows ?? []).map((flow) => [flow.prefix, flow.stageField ?? "stage"]));
    for (const flow of workflows ?? []) {
      const terminal = new Set(flow.terminal ?? []);
      const open = flow.stages.filter((stage) => !terminal.has(stage));
      const track = [...open, ...flow.stages.filter((stage) => terminal.has(stage)).slice(0, 1)];
      const next = Object.fromEntries(Object.entries(flow.transitions ?? {})
        .map(([from, targets]) => [from, targets.find((to) => track.includes(to))]).filter(([, to]) => to));
      if (flow.prefix === "orders/") {
        [ORDER_TRACK, ORDER_STAGES, ORDER_TERMINAL, ORDER_NEXT] = [track, flow.stages, terminal, next];
      } else if (flow.prefix === "intake/") {
        [INTAKE_TRACK, INTAKE_STAGES, INTAKE_TERMINAL] = [track, flow.stages, terminal];
      }
    }
    renderAll(orders, $("order-board"), orderCard);
    renderAll(jobs, $("intake-board"), jobCard);
    renderStats("order-stats", ORDER_STAGES, orderStats.value);
    renderStats("intake-stats", INTAKE_STAGES, intakeStats.value);
  } catch { /* keep the shipped workflows */ }
}
hub.on("hello", () => { readWorkflows().finally(startFollowing); });

// ---- subscriptions ----------------------------------------------------------------

/** Follows a workflow's records through two live queries (its open stages;
 *  the last RECENT that finished): `map` holds their union, one card each. */
function followQueries(prefix, open, terminal, map, board, make) {
  const subs = [];
  /** The newest copy of a record in any of the queries, or null. */
  const lookup = (name) => {
    let best = null;
    for (const sub of subs) {
      const record = sub.value.get(name);
      if (record && (!best || record.seq > best.seq)) best = record;
    }
    return best;
  };
  const listener = (records, changes) => {
    if (!changes) { // a snapshot: redraw from every query's result
      map.clear();
      for (const sub of subs) for (const name of sub.value.keys()) map.set(name, lookup(name));
      renderAll(map, board, make);
    } else {
      for (const name of new Set([...changes.entered, ...changes.changed, ...changes.left])) {
        const record = lookup(name);
        if (record) {
          map.set(name, record);
          place(record, board, make, { flash: true });
        } else if (map.has(name)) {
          // Gone from this query: a record that finishes leaves the open
          // query and enters the finished one in two messages. Its card
          // goes only if no query has it a moment later, so it is the same
          // card (and keeps the focus) when it only moved.
          setTimeout(() => {
            if (lookup(name) || !map.has(name)) return;
            map.delete(name);
            place({ name }, board, make);
            followItems();
          }, LEAVE_GRACE_MS);
        }
      }
    }
    followItems();
  };
  subs.push(hub.query({ prefix, where: { stage: open } }, listener));
  subs.push(hub.query({ prefix, where: { stage: terminal }, order: "-updated", limit: RECENT }, listener));
  return subs;
}

/** The items a card shows: its record's item, and for a job the items the
 *  codes in its photos resolved to (their names are shown). */
function itemsShown(record) {
  const names = [record.data?.item];
  const codes = record.data?.analysis?.codes;
  if (Array.isArray(codes)) for (const code of codes) if (code?.found === true) names.push(code.name);
  return names.filter((name) => typeof name === "string" && name.startsWith("items/"));
}

/** One record subscription per item a card shows (its name, photo, stock). */
const itemSubs = new Map();
function followItems() {
  const wanted = new Set();
  for (const record of [...orders.values(), ...jobs.values()]) for (const item of itemsShown(record)) wanted.add(item);
  for (const name of wanted) {
    if (itemSubs.has(name)) continue;
    itemSubs.set(name, hub.record(name, (envelope) => {
      if (envelope) items.set(name, envelope); else items.delete(name);
      for (const [map, board, make] of [[orders, $("order-board"), orderCard], [jobs, $("intake-board"), jobCard]]) {
        for (const record of map.values()) if (itemsShown(record).includes(name)) place(record, board, make);
      }
    }));
  }
  for (const [name, sub] of itemSubs) {
    if (wanted.has(name)) continue;
    sub.unsubscribe();
    itemSubs.delete(name);
    items.delete(name);
  }
}

/** Subscribes once the hub's workflows are known (their stages make the queries). */
let following = null;
function startFollowing() {
  if (following) return;
  const openOf = (stages, terminal) => stages.filter((stage) => !terminal.has(stage));
  following = [
    ...followQueries("orders/", openOf(ORDER_STAGES, ORDER_TERMINAL), [...ORDER_TERMINAL], orders, $("order-board"), orderCard),
    ...followQueries("intake/", openOf(INTAKE_STAGES, INTAKE_TERMINAL), [...INTAKE_TERMINAL], jobs, $("intake-board"), jobCard),
  ];
}
const orderStats = hub.record("stats/orders", (envelope) => renderStats("order-stats", ORDER_STAGES, envelope));
const intakeStats = hub.record("stats/intake", (envelope) => renderStats("intake-stats", INTAKE_STAGES, envelope));
const conflicts = followConflicts(hub, { keepFor });
startCounter({ hub, orders, canAct, setPhoto, label, isOpenOrder: (envelope) => !ORDER_TERMINAL.has(envelope.data?.stage) });

// Time in stage ticks; terminal records leave after their while.
setInterval(() => {
  for (const node of document.querySelectorAll(".since[data-since]")) {
    node.textContent = duration(hubNow() - Number(node.dataset.since));
  }
  for (const [name, card] of cards) {
    const envelope = orders.get(name) ?? jobs.get(name);
    if (card.dataset.terminal === "true" && envelope && expired(envelope)) { card.remove(); cards.delete(name); updateEmpty(); }
  }
  conflicts.tick();
  for (const chart of Object.values(timing)) chart.tick();
}, 1000);

hub.connect().catch((error) => { if (error?.code !== "unauthorized") notice(error.message); });
