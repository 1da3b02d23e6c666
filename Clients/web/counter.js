// The counter: a new-order form (staff and admin) and the items and stock
// view, beside the board (app.js).
//
// - The form's item picker asks the hub (GET /v1/items?q=…: a code as
//   /v1/resolve reads it, the words of an item's name, the start of its
//   record name) and shows the photo, location and stock of each match.
//   The order is a `set` with `version: 0` under a fresh `orders/<16 hex>`
//   name, as `tally order new` makes it; an issue order asks the hub to
//   check the stock (`checkStock`). The card then arrives through the
//   board's live query like any other; a refusal shows the hub's own words.
// - The items view shows one page of items (GET /v1/items?after=…, or a
//   search), each followed by a record subscription while it is shown
//   (never the items/ prefix), with the open orders that will move it read
//   from the board's live query of open orders.

import { Tally, TallyError } from "/js/tally.js";
import { $, el } from "./ui.js";

/** Items per page of the items view; matches shown by the form's picker. */
const PAGE = 20;
const PICKS = 8;
/** Typing settles this long before the hub is asked. */
const DEBOUNCE_MS = 150;

/** A fresh order name: `orders/` and 16 random lowercase hex digits. */
export function newOrderName() {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return `orders/${[...bytes].map((byte) => byte.toString(16).padStart(2, "0")).join("")}`;
}

/** Whether an item's stock is at or below its threshold (`lowStock` on
 *  the item, else the hub's default). */
export function isLow(data, fallback) {
  const limit = typeof data?.lowStock === "number" ? data.lowStock : fallback;
  return typeof data?.stock === "number" && typeof limit === "number" && data.stock <= limit;
}

/**
 * Starts the counter in the page's `#new-order` and `#items` sections.
 * `orders`: the board's map name → envelope of the orders it follows;
 * `isOpenOrder(envelope)`; `canAct()`: whether the role may write;
 * `setPhoto(img, sha)`; `label(stage)`.
 */
export function startCounter({ hub, orders, isOpenOrder, canAct, setPhoto, label }) {
  let lowStock = 5; // replaced by the hub's (every /v1/items answer has it)

  async function askItems(query) {
    const response = await fetch(`/v1/items?${new URLSearchParams(query)}`,
      hub.token ? { headers: { Authorization: `Bearer ${hub.token}` } } : {});
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new TallyError(body?.error?.code ?? "http", body?.error?.message ?? `HTTP ${response.status}`);
    if (typeof body.lowStock === "number") lowStock = body.lowStock;
    return body;
  }

  function photo(data, alt) {
    const img = el("img", { alt, loading: "lazy", decoding: "async", width: 56, height: 42 });
    if (data?.cover) setPhoto(img, data.cover);
    else img.classList.add("none");
    return img;
  }
  const itemTitle = (envelope) => envelope.data?.name ?? envelope.name.replace(/^items\//, "");
  const facts = (envelope) => el("span", { class: "facts" },
    envelope.data?.sku ? el("span", { class: "sku" }, String(envelope.data.sku)) : null,
    el("span", { class: "location" }, envelope.data?.location ? String(envelope.data.location) : "no location"),
    el("span", { class: "stock", "data-stock": envelope.data?.stock ?? "" },
      typeof envelope.data?.stock === "number" ? `stock ${envelope.data.stock}` : "no stock"));

  // ---- the new-order form -----------------------------------------------------

  const form = $("new-order");
  const picked = { envelope: null, sub: null };
  form.append(
    el("h2", { id: "new-order-title" }, "New order"),
    el("form", { id: "new-order-form", novalidate: true, autocomplete: "off" },
      el("label", { for: "order-item-search" }, "Item"),
      el("input", { id: "order-item-search", type: "search", spellcheck: "false", enterkeyhint: "search",
        placeholder: "Name, SKU, serial or scanned code", "aria-controls": "order-item-results" }),
      el("ul", { id: "order-item-results", class: "picks", "aria-label": "Matching items" }),
      el("div", { id: "order-item", class: "picked", "aria-live": "polite", hidden: true }),
      el("div", { class: "row" },
        el("label", {}, "Quantity ", el("input", { id: "order-qty", type: "number", min: 1, step: 1, value: 1, inputmode: "numeric" })),
        el("label", {}, "Kind ", el("select", { id: "order-kind" },
          el("option", { value: "issue" }, "Issue (out)"), el("option", { value: "receive" }, "Receive (in)"))),
        el("button", { id: "order-submit", type: "submit" }, "Create order")),
      el("p", { id: "order-error", class: "error", role: "alert", hidden: true }),
      el("p", { id: "order-done", class: "done", role: "status", hidden: true })));
  const search = $("order-item-search");
  const results = $("order-item-results");

  function showPicked(envelope) {
    const box = $("order-item");
    if (!envelope) { box.hidden = true; box.removeAttribute("data-item"); box.replaceChildren(); return; }
    box.hidden = false;
    box.dataset.item = envelope.name;
    box.replaceChildren(photo(envelope.data, ""), el("span", { class: "what" },
      el("strong", { class: "item-name" }, itemTitle(envelope)), el("span", { class: "record" }, envelope.name), facts(envelope)));
  }

  function pick(envelope) {
    picked.sub?.unsubscribe();
    picked.envelope = envelope;
    results.replaceChildren();
    search.value = itemTitle(envelope);
    showPicked(envelope);
    // Its stock and photo stay live while it is picked.
    picked.sub = hub.record(envelope.name, (current) => {
      if (picked.envelope?.name !== envelope.name) return;
      if (current) { picked.envelope = current; showPicked(current); }
    });
    $("order-error").hidden = true;
    $("order-qty").focus();
  }

  let searchTimer = null;
  let searchRound = 0;
  async function findItems() {
    const text = search.value.trim();
    const round = ++searchRound;
    if (!text) { results.replaceChildren(); return; }
    try {
      const { items } = await askItems({ q: text, limit: PICKS });
      if (round !== searchRound) return;
      results.replaceChildren(...items.map((envelope) => el("li", {},
        el("button", { type: "button", class: "pick ghost", "data-item": envelope.name, onclick: () => pick(envelope) },
          photo(envelope.data, ""), el("span", { class: "what" },
            el("strong", { class: "item-name" }, itemTitle(envelope)), el("span", { class: "record" }, envelope.name), facts(envelope))))));
      if (!items.length) results.append(el("li", { class: "none" }, `No item matches “${text}”.`));
    } catch (failure) {
      if (round === searchRound) results.replaceChildren(el("li", { class: "error" }, failure.message));
    }
  }
  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(findItems, DEBOUNCE_MS);
  });
  search.addEventListener("keydown", async (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    // A scanner types the code and Enter: take the first match.
    clearTimeout(searchTimer);
    await findItems();
    results.querySelector("button.pick")?.click();
  });

  $("new-order-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = $("order-error");
    const done = $("order-done");
    error.hidden = true;
    done.hidden = true;
    // The picked item, or what was typed taken as an item id (the hub refuses an unknown one).
    const typed = search.value.trim();
    const item = picked.envelope && search.value === itemTitle(picked.envelope) ? picked.envelope.name
      : typed ? (typed.startsWith("items/") ? typed : `items/${typed}`) : null;
    const qty = Number($("order-qty").value);
    const kind = $("order-kind").value;
    const refuse = (text, code) => { error.textContent = text; error.dataset.code = code ?? ""; error.hidden = false; };
    if (!item) { refuse("Pick an item first: search by name, SKU, serial or code."); search.focus(); return; }
    if (!Number.isInteger(qty) || qty < 1) { refuse("The quantity must be a whole number of at least 1."); $("order-qty").focus(); return; }
    const button = $("order-submit");
    button.disabled = true;
    const name = newOrderName();
    try {
      await hub.set(name, { item, qty, kind }, { version: 0, idem: Tally.idem(), ...(kind === "issue" ? { checkStock: true } : {}) });
      // The board's live query brings the card; nothing is drawn here.
      done.textContent = `Order ${name.slice("orders/".length)} created: ${kind === "receive" ? "+" : "×"} ${qty} ${picked.envelope?.name === item ? itemTitle(picked.envelope) : item}.`;
      done.dataset.order = name;
      done.hidden = false;
      $("order-qty").value = 1;
    } catch (failure) {
      refuse(failure instanceof TallyError && failure.code
        ? `${failure.message} (${failure.code})` : String(failure?.message ?? failure), failure?.code);
    } finally {
      button.disabled = false;
    }
  });

  // ---- the items and stock view ------------------------------------------------

  const view = $("items");
  view.append(
    el("div", { class: "panel-head" },
      el("h2", { id: "items-title" }, "Items and stock"),
      el("input", { id: "items-search", type: "search", spellcheck: "false", placeholder: "Search items",
        "aria-label": "Search items by name, SKU, serial or code" })),
    el("div", { id: "item-list", class: "items", "aria-live": "off" }),
    el("p", { id: "items-empty", class: "empty", hidden: true }, "No items."),
    el("p", { id: "items-error", class: "error", role: "alert", hidden: true }),
    el("nav", { class: "pager", "aria-label": "Item pages" },
      el("button", { id: "items-prev", type: "button", class: "ghost", disabled: true }, "← Previous"),
      el("span", { id: "items-page", class: "page" }),
      el("button", { id: "items-next", type: "button", class: "ghost", disabled: true }, "Next →")));

  const rows = new Map(); // name → { envelope, row, sub }
  const starts = [null]; // the `after` of each page seen (for Previous)
  let page = 0;
  let listRound = 0;

  function openOrdersOf(name) {
    const found = [];
    for (const envelope of orders.values()) {
      if (envelope?.data?.item === name && isOpenOrder(envelope)) found.push(envelope);
    }
    return found.sort((a, b) => (a.created ?? 0) - (b.created ?? 0));
  }

  function drawOrders(name, list) {
    const open = openOrdersOf(name);
    const key = open.map((o) => `${o.name}:${o.version}`).join(",");
    if (list.dataset.key === key) return;
    list.dataset.key = key;
    const moving = open.reduce((sum, o) => sum + (Number(o.data.qty) || 0) * (o.data.kind === "receive" ? 1 : -1), 0);
    list.replaceChildren(...open.map((o) => el("li", { "data-order": o.name, "data-stage": o.data.stage },
      `${o.data.kind === "receive" ? "+" : "×"} ${o.data.qty ?? "?"} · ${label(o.data.stage)} · ${o.name.slice("orders/".length)}`)));
    list.dataset.count = String(open.length);
    list.previousElementSibling.textContent = open.length
      ? `${open.length} open order${open.length === 1 ? "" : "s"} (${moving >= 0 ? "+" : "−"}${Math.abs(moving)})` : "No open orders";
  }

  function itemRow(envelope) {
    const data = envelope.data ?? {};
    const low = isLow(data, lowStock);
    return el("article", { class: "item-row", "data-item": envelope.name, "data-version": envelope.version, "data-low": String(low) },
      photo(data, ""),
      el("div", { class: "what" },
        el("h3", {}, el("span", { class: "item-name" }, itemTitle(envelope)),
          low ? el("span", { class: "low", title: `at or below ${typeof data.lowStock === "number" ? data.lowStock : lowStock}` }, "Low stock") : null),
        el("span", { class: "record" }, envelope.name),
        facts(envelope)),
      el("div", { class: "moves" }, el("span", { class: "moves-title" }), el("ul", { class: "open-orders" })));
  }

  /** Draws an item's row in place of its old one (same position). */
  function drawItem(envelope) {
    const entry = rows.get(envelope.name);
    if (!entry) return;
    const row = itemRow(envelope);
    entry.row.replaceWith(row);
    entry.row = row;
    entry.envelope = envelope;
    drawOrders(envelope.name, row.querySelector(".open-orders"));
  }

  /** Shows `items` (envelopes), following each while it is shown. */
  function show(items) {
    const wanted = new Set(items.map((envelope) => envelope.name));
    for (const [name, entry] of rows) {
      if (!wanted.has(name)) { entry.sub.unsubscribe(); rows.delete(name); }
    }
    const list = $("item-list");
    const drawn = [];
    for (const envelope of items) {
      let entry = rows.get(envelope.name);
      if (!entry) {
        entry = { envelope, row: itemRow(envelope), sub: null };
        rows.set(envelope.name, entry);
        entry.sub = hub.record(envelope.name, (current) => {
          if (!rows.has(envelope.name)) return;
          if (current) drawItem(current);
          else { rows.get(envelope.name).row.classList.add("gone"); }
        });
      } else if ((envelope.seq ?? 0) > (entry.envelope.seq ?? 0)) {
        entry.envelope = envelope;
        const row = itemRow(envelope);
        entry.row.replaceWith(row);
        entry.row = row;
      }
      drawOrders(envelope.name, entry.row.querySelector(".open-orders"));
      drawn.push(entry.row);
    }
    list.replaceChildren(...drawn);
    $("items-empty").hidden = drawn.length > 0;
  }

  async function loadPage(index) {
    const round = ++listRound;
    const text = $("items-search").value.trim();
    $("items-error").hidden = true;
    try {
      if (text) {
        const body = await askItems({ q: text, limit: PAGE });
        if (round !== listRound) return;
        show(body.items);
        $("items-page").textContent = `${body.items.length} match${body.items.length === 1 ? "" : "es"}`;
        $("items-prev").disabled = true;
        $("items-next").disabled = true;
        return;
      }
      const after = starts[index];
      const body = await askItems(after ? { after, limit: PAGE } : { limit: PAGE });
      if (round !== listRound) return;
      page = index;
      if (body.more && body.items.length) starts[index + 1] = body.items[body.items.length - 1].name;
      show(body.items);
      $("items-page").textContent = `Page ${index + 1}`;
      $("items-prev").disabled = index === 0;
      $("items-next").disabled = !body.more;
    } catch (failure) {
      if (round !== listRound) return;
      $("items-error").textContent = failure.message;
      $("items-error").hidden = false;
    }
  }

  let listTimer = null;
  $("items-search").addEventListener("input", () => {
    clearTimeout(listTimer);
    listTimer = setTimeout(() => loadPage(0), DEBOUNCE_MS);
  });
  $("items-prev").addEventListener("click", () => loadPage(Math.max(0, page - 1)));
  $("items-next").addEventListener("click", () => loadPage(page + 1));

  // The open orders come from the board's live query: redraw the shown
  // items' lists once its pushes have been applied.
  let ordersTimer = null;
  hub.on("message", () => {
    clearTimeout(ordersTimer);
    ordersTimer = setTimeout(() => {
      for (const [name, entry] of rows) drawOrders(name, entry.row.querySelector(".open-orders"));
    }, 30);
  });

  // Each hello (a new token, a reconnect) may change what the role sees and does.
  hub.on("hello", () => {
    form.hidden = !canAct();
    loadPage(page);
  });
  form.hidden = !canAct();
}
