// "My orders": a requester's own orders (the `client` role's, or anyone's
// own), live, with their progress as steps and the time in the current
// stage; a form to request an item; a look-up of one order by name.
//
// It follows only what the caller owns, through owner-restricted live
// queries ({"own": true}, Protocol/PROTOCOL.md "Live queries"): the open
// stages, and the few that finished last. Another user's order is never
// asked for by the page; looked up by name, the hub refuses it (forbidden),
// and the page says so.

import { Tally, State, TallyError, defaultURL } from "/js/tally.js";
import { $, el, duration, isSHA, morph, photoSetter, progressSteps, stageBefore, stageSince as stageSinceIn } from "./ui.js";

const TOKEN_KEY = "tally.token";
const CLIENT = "tally-mine/1";
/** How many finished orders the page keeps. */
const RECENT = 5;

// The shipped order workflow; replaced by the hub's own (GET /v1/workflows) once read.
let TRACK = ["received", "in-progress", "ready", "delivered"];
let STAGES = [...TRACK, "cancelled"];
let TERMINAL = new Set(["delivered", "cancelled"]);
const LABELS = { "in-progress": "In progress" };
const label = (stage) => LABELS[stage] ?? (stage ? stage[0].toUpperCase() + stage.slice(1) : "—");

const hub = new Tally([defaultURL()], { token: localStorage.getItem(TOKEN_KEY) || undefined, client: CLIENT });
window.tallyMine = { hub }; // for the console and for tests

const open = new Map(); // name → envelope
const finished = new Map();
const items = new Map();
let clockOffset = null; // browser clock − hub clock, from pushes (smallest seen)
const hubNow = () => Date.now() - (clockOffset ?? 0);

// ---- cards ----------------------------------------------------------------------

const stageSince = (envelope) => stageSinceIn(envelope, hubNow);
const itemName = (name) => items.get(name)?.data?.name ?? (typeof name === "string" ? name.replace(/^items\//, "") : "?");

const setPhoto = photoSetter(hub);
function photo(sha) {
  const img = el("img", { alt: "", loading: "lazy", decoding: "async", width: 84, height: 63 });
  setPhoto(img, sha);
  return img;
}

function orderCard(envelope) {
  const data = envelope.data ?? {};
  const stage = data.stage;
  const short = envelope.name.slice("orders/".length);
  const item = items.get(data.item);
  const since = stageSince(envelope);
  const card = el("article", {
    class: "card order", "data-record": envelope.name, "data-stage": stage, "data-version": envelope.version,
    "data-terminal": String(TERMINAL.has(stage)), "aria-labelledby": `title-${envelope.name}`,
  },
    el("h3", { id: `title-${envelope.name}` },
      el("span", { class: "item" }, itemName(data.item)),
      el("span", { class: "qty", title: data.kind === "receive" ? "coming in" : "going out" },
        `${data.kind === "receive" ? "+" : "×"} ${data.qty ?? "?"}`)),
    el("div", { class: "meta" },
      el("span", { class: "stage" }, label(stage)),
      el("span", { class: "since", "data-since": since, title: `in ${label(stage).toLowerCase()} since` },
        TERMINAL.has(stage) ? `${duration(hubNow() - since)} ago` : `for ${duration(hubNow() - since)}`),
      el("span", { class: "name" }, short),
      typeof item?.data?.location === "string" ? el("span", { class: "location" }, item.data.location) : null),
    progressSteps(TRACK, stage, stageBefore(envelope), `Order ${short}`, label),
  );
  if (isSHA(item?.data?.cover)) {
    card.classList.add("has-photo");
    card.prepend(el("div", { class: "thumbs order-photo" }, photo(item.data.cover)));
  }
  return card;
}

/** Draws `map` on `board`: cards kept (updated in place), added in order
 *  (oldest first; finished ones newest first), removed when gone. */
function draw(map, board, empty, newestFirst = false) {
  const wanted = [...map.values()].sort((a, b) => newestFirst
    ? stageSince(b) - stageSince(a) : (a.created ?? 0) - (b.created ?? 0) || (a.name < b.name ? -1 : 1));
  const present = new Map([...board.querySelectorAll(".card")].map((card) => [card.dataset.record, card]));
  let previous = null;
  for (const envelope of wanted) {
    const fresh = orderCard(envelope);
    const old = present.get(envelope.name);
    const card = old ? morph(old, fresh) : fresh;
    present.delete(envelope.name);
    const next = previous ? previous.nextElementSibling : board.querySelector(".card");
    if (next !== card) board.insertBefore(card, next);
    previous = card;
  }
  for (const card of present.values()) card.remove();
  $(empty).hidden = wanted.length > 0;
}

function drawAll() {
  draw(open, $("mine-board"), "mine-empty");
  draw(finished, $("finished-board"), "finished-empty", true);
  $("mine-count").textContent = open.size ? String(open.size) : "";
  const looked = $("lookup-result").querySelector(".card");
  if (looked && lookedUp) morph(looked, orderCard(lookedUp));
}

// ---- subscriptions ------------------------------------------------------------------

/** One record subscription per item an order names (its name, photo, location). */
const itemSubs = new Map();
function followItems() {
  const wanted = new Set();
  for (const record of [...open.values(), ...finished.values(), ...(lookedUp ? [lookedUp] : [])]) {
    const item = record.data?.item;
    if (typeof item === "string" && item.startsWith("items/")) wanted.add(item);
  }
  for (const name of wanted) {
    if (itemSubs.has(name)) continue;
    itemSubs.set(name, hub.record(name, (envelope) => {
      if (envelope) items.set(name, envelope); else items.delete(name);
      drawAll();
    }));
  }
  for (const [name, sub] of itemSubs) {
    if (wanted.has(name)) continue;
    sub.unsubscribe();
    itemSubs.delete(name);
    items.delete(name);
  }
}

function follow(query, map) {
  const sub = hub.query(query, (records) => {
    map.clear();
    for (const [name, record] of records) map.set(name, record);
    drawAll();
    followItems();
  });
  sub.ready.catch((error) => notice(`${error.message}${error.code ? ` (${error.code})` : ""}`));
  return sub;
}

let following = null;
function startFollowing() {
  if (following) return;
  const openStages = STAGES.filter((stage) => !TERMINAL.has(stage));
  following = [
    follow({ prefix: "orders/", where: { stage: openStages }, own: true }, open),
    follow({ prefix: "orders/", where: { stage: [...TERMINAL] }, own: true, order: "-updated", limit: RECENT }, finished),
  ];
}

async function readWorkflows() {
  try {
    const response = await fetch("/v1/workflows", hub.token ? { headers: { Authorization: `Bearer ${hub.token}` } } : {});
    if (!response.ok) return;
    const { workflows } = await response.json();
    const flow = (workflows ?? []).find((candidate) => candidate.prefix === "orders/");
    if (!flow) return;
    TERMINAL = new Set(flow.terminal ?? []);
    STAGES = flow.stages;
    TRACK = [...STAGES.filter((stage) => !TERMINAL.has(stage)), ...STAGES.filter((stage) => TERMINAL.has(stage)).slice(0, 1)];
  } catch { /* keep the shipped workflow */ }
}

// ---- requesting an item ---------------------------------------------------------------

const authHeaders = () => (hub.token ? { Authorization: `Bearer ${hub.token}` } : {});
const explain = (failure) => `${failure.message}${failure.code ? ` (${failure.code})` : ""}`;

/** The item a typed text names: a record name (`items/…`) as it is, else
 *  the item a code resolves to (GET /v1/resolve/{code}). */
async function resolveItem(text) {
  if (text.startsWith("items/")) {
    // Its name for the answer, when it can be read; whether it exists is
    // the hub's to say when the order is made.
    const envelope = await hub.get(text).catch(() => null);
    if (envelope) items.set(text, envelope);
    return text;
  }
  const response = await fetch(`/v1/resolve/${encodeURIComponent(text)}`, { headers: authHeaders() });
  const body = await response.json().catch(() => null);
  if (response.ok && body?.found && typeof body.name === "string") {
    if (body.record) items.set(body.name, body.record);
    return body.name;
  }
  const error = body?.error ?? {};
  if (error.code === "not_found") throw new TallyError("not_found", `No item has the code “${text}”: type its record name (items/…) or another code.`);
  throw new TallyError(error.code ?? "failed", error.message ?? `The hub answered ${response.status}.`);
}

function formMessage(id, text) {
  $(id).textContent = text ?? "";
  $(id).hidden = !text;
}

$("request-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  formMessage("request-error", null);
  formMessage("request-done", null);
  const text = $("request-item").value.trim();
  const qty = Number($("request-qty").value);
  if (!text) { formMessage("request-error", "Type an item: its record name (items/…) or a code."); $("request-item").focus(); return; }
  if (!Number.isInteger(qty) || qty < 1) { formMessage("request-error", "The quantity must be a whole number, 1 or more."); $("request-qty").focus(); return; }
  const button = $("request-submit");
  button.disabled = true;
  try {
    const item = await resolveItem(text);
    const name = `orders/${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
    await hub.set(name, { item, qty, kind: "issue" }, { version: 0, idem: Tally.idem() });
    formMessage("request-done", `Requested ${qty} × ${itemName(item)} (${name}).`);
    $("request-done").dataset.record = name;
    $("request-item").value = "";
    $("request-qty").value = "1";
  } catch (failure) {
    formMessage("request-error", failure instanceof TallyError ? explain(failure) : `Could not send it: ${failure.message}`);
  } finally {
    button.disabled = false;
  }
});

// ---- looking one order up ------------------------------------------------------------

let lookedUp = null;
let lookupSub = null;
async function lookUp(name) {
  formMessage("lookup-error", null);
  $("lookup-result").replaceChildren();
  lookedUp = null;
  lookupSub?.unsubscribe();
  lookupSub = null;
  const full = name.startsWith("orders/") ? name : `orders/${name}`;
  try {
    const envelope = await hub.get(full);
    lookedUp = envelope;
    $("lookup-result").append(orderCard(envelope));
    followItems();
    lookupSub = hub.record(full, (record) => {
      if (!record) return;
      lookedUp = record;
      const card = $("lookup-result").querySelector(".card");
      if (card) morph(card, orderCard(record));
    });
  } catch (failure) {
    formMessage("lookup-error", failure?.code === "forbidden"
      ? `${full} is not yours to see: ${explain(failure)}`
      : failure?.code === "not_found" ? `There is no order ${full}.` : explain(failure));
    $("lookup-error").dataset.code = failure?.code ?? "";
  }
}
$("lookup-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = $("lookup-name").value.trim();
  if (name) lookUp(name); else formMessage("lookup-error", "Type an order's name (orders/…).");
});

// ---- connection, login ------------------------------------------------------------------

const STATE_LABELS = { [State.live]: "Live", [State.connecting]: "Connecting…", [State.reconnecting]: "Reconnecting…", [State.offline]: "Offline" };

function notice(text) {
  $("notice").textContent = text ?? "";
  $("notice").hidden = !text;
}

hub.onState((state, detail) => {
  const badge = $("connection");
  badge.dataset.state = state;
  badge.querySelector(".label").textContent = STATE_LABELS[state] ?? state;
  document.body.dataset.connection = state;
  if (detail.error?.code === "unauthorized") openLogin(hub.token ? "The hub did not accept this token." : "This hub needs a token.");
  else if (detail.error?.code === "insecure") notice(detail.error.message);
});

hub.on("hello", () => {
  const openHub = hub.user === CLIENT || (hub.user === "anonymous" && !hub.token);
  $("who").textContent = !hub.user ? "" : openHub ? `open hub · ${hub.role}` : `${hub.user} · ${hub.role}`;
  notice(null);
  readWorkflows().finally(startFollowing);
  const wanted = new URLSearchParams(location.search).get("order");
  if (wanted && !lookedUp) { $("lookup-name").value = wanted; lookUp(wanted); }
});

hub.on("message", (message) => {
  if ((message.op === "change" || message.op === "query") && typeof message.time === "number") {
    const offset = Date.now() - message.time;
    clockOffset = clockOffset === null ? offset : Math.min(clockOffset, offset);
  }
});

function openLogin(reason) {
  $("login-reason").textContent = reason ?? "Paste your token. It is kept in this browser only.";
  $("token").value = "";
  if (!$("login").open) $("login").showModal();
}
$("login-button").addEventListener("click", () => openLogin());
$("login").addEventListener("close", () => {
  const choice = $("login").returnValue;
  if (choice === "save" && $("token").value.trim()) localStorage.setItem(TOKEN_KEY, $("token").value.trim());
  else if (choice === "clear") localStorage.removeItem(TOKEN_KEY);
  else return;
  // Another user: what the page held was the last one's.
  setPhoto.forget();
  for (const sub of following ?? []) sub.unsubscribe();
  following = null;
  open.clear();
  finished.clear();
  drawAll();
  notice(null);
  hub.setToken(localStorage.getItem(TOKEN_KEY) || null);
  hub.connect().catch(() => {});
});

// Time in stage ticks.
setInterval(() => {
  for (const node of document.querySelectorAll(".since[data-since]")) {
    const card = node.closest(".card");
    const ago = duration(hubNow() - Number(node.dataset.since));
    node.textContent = card?.dataset.terminal === "true" ? `${ago} ago` : `for ${ago}`;
  }
}, 1000);

hub.connect().catch((error) => { if (error?.code !== "unauthorized") notice(error.message); });
