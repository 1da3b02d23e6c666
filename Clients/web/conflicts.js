// The Conflicts panel: every open `conflicts/<id>` record an offline mirror
// published (docs/mirror.md, "Conflicts"), live from a query for the
// unresolved ones (settled conflicts stay as records: the panel never loads
// them). Each row shows the record, the field, the three
// values, the mirror and when, with "Keep local" and "Keep hub": a press
// sends one atomic write (hub.resolveConflict), and the row leaves when the
// conflict record says resolved — settled here or anywhere else. A refusal
// (a read-only role's `forbidden`, say) is shown in the row.
//
// The panel stays hidden until the board has seen an open conflict; after
// that it says "No open conflicts." rather than vanishing under the hand
// that settled the last one.

import { isOpenConflict, conflictId, CONFLICT_PREFIX } from "/js/tally.js";
import { $, el, duration } from "./ui.js";

/**
 * Subscribes to `conflicts/` and keeps the panel (`#conflicts`) current.
 * @param hub the board's Tally client
 * @param keepFor `(recordName) => fields` a whole-record set must leave to the hub
 * @returns `{ tick }`: call every second to age the "when" column
 */
export function followConflicts(hub, { keepFor }) {
  const open = new Map(); // id → the conflict's envelope
  const rows = new Map(); // id → its row
  const pending = new Set(); // ids with a write in flight (or waiting for the push that closes them)
  const errors = new Map(); // id → why the last press was refused; kept across redraws
  let pressed = null; // {id, take} of the last press: where the keyboard goes when its row leaves
  const list = $("conflict-list");

  hub.query({ prefix: CONFLICT_PREFIX, where: { resolved: [false] } }, (records, changes) => {
    if (!changes) { // the first result
      open.clear();
      for (const envelope of records.values()) if (isOpenConflict(envelope)) open.set(conflictId(envelope.name), envelope);
      for (const id of [...rows.keys()]) if (!open.has(id)) drop(id);
      for (const envelope of open.values()) place(envelope);
    } else {
      for (const name of [...changes.entered, ...changes.changed, ...changes.left]) {
        const id = conflictId(name);
        const envelope = records.get(name);
        if (isOpenConflict(envelope)) { open.set(id, envelope); place(envelope); } else { open.delete(id); drop(id); }
      }
    }
    updateEmpty();
  });

  function row(envelope) {
    const id = conflictId(envelope.name);
    const { name, field, local, hub: hubValue, base, mirror, created } = envelope.data;
    const when = Number.isFinite(created) && Math.abs(created) <= 8.64e15 ? created : null; // a Date's range
    const whole = field === "*";
    const busy = pending.has(id);
    const error = errors.get(id);
    const target = whole ? name : `${field} of ${name}`;
    const localAction = whole && local === null ? `delete ${name}` : `set ${target} to the mirror's value`;
    // Whole records and long values read better one under the other than in three narrow columns.
    const stacked = whole || [local, hubValue, base].some((value) => (JSON.stringify(value) ?? "").length > 24);
    return el("article", { class: `card conflict${stacked ? " stacked" : ""}`, "data-conflict": id, "data-field": field,
      "aria-labelledby": `conflict-title-${id}`, "aria-busy": busy ? "true" : null },
      el("h3", { id: `conflict-title-${id}` },
        el("span", { class: "item" }, name),
        el("span", { class: "field" }, whole ? "whole record" : field)),
      el("dl", { class: "sides" }, side("Local", local, whole, "local"), side("Hub", hubValue, whole, "hub"),
        side("Base", base, whole, "base")),
      el("div", { class: "meta" },
        el("span", { class: "mirror", title: "the mirror that recorded it" }, String(mirror ?? "unknown mirror")),
        when !== null ? el("time", { class: "ago", "data-at": when,
          datetime: new Date(when).toISOString(), title: new Date(when).toLocaleString() }, ago(when)) : null),
      el("div", { class: "buttons" },
        el("button", { type: "button", class: "take-local", "data-take": "local", disabled: busy,
          "aria-label": `Keep local: ${localAction}`, onclick: () => resolve(id, "local") }, "Keep local"),
        el("button", { type: "button", class: "take-hub ghost", "data-take": "hub", disabled: busy,
          "aria-label": `Keep hub: leave ${target} as the hub has it`, onclick: () => resolve(id, "hub") }, "Keep hub")),
      el("p", { class: "error", role: "alert", hidden: !error }, error ?? ""));
  }

  /** Puts a conflict's row in place, oldest first (replacing the old row
   *  where it stands, so the keyboard focus stays on the same button). */
  function place(envelope) {
    const id = conflictId(envelope.name);
    const old = rows.get(id);
    const focused = old?.contains(document.activeElement) ? document.activeElement.dataset.take
      : lostFocus() && pressed?.id === id ? pressed.take : null;
    const fresh = row(envelope);
    const created = Number.isSafeInteger(envelope.data.created) ? Math.max(0, envelope.data.created) : 0;
    fresh.dataset.order = `${String(created).padStart(16, "0")}:${id}`;
    if (old && old.dataset.order === fresh.dataset.order) old.replaceWith(fresh);
    else {
      old?.remove();
      const after = [...list.querySelectorAll(".conflict")].find((other) => other.dataset.order > fresh.dataset.order);
      list.insertBefore(fresh, after ?? null);
    }
    rows.set(id, fresh);
    if (focused) fresh.querySelector(`[data-take="${focused}"]:not(:disabled)`)?.focus();
  }

  /** Takes a settled conflict's row away; if the keyboard was on it, it
   *  moves to the next row (or the previous one, or the panel's heading). */
  function drop(id) {
    const old = rows.get(id);
    pending.delete(id);
    errors.delete(id);
    if (!old) return;
    const hadFocus = old.contains(document.activeElement) || (lostFocus() && pressed?.id === id);
    const neighbour = [old.nextElementSibling, old.previousElementSibling].find((node) => node?.classList.contains("conflict"));
    old.remove();
    rows.delete(id);
    if (hadFocus) (neighbour?.querySelector(`[data-take="${pressed?.take ?? "local"}"]`) ?? $("conflicts-title")).focus();
    if (pressed?.id === id) pressed = null;
  }

  function updateEmpty() {
    const count = open.size;
    if (count > 0) $("conflicts").hidden = false;
    $("conflicts-empty").hidden = count > 0;
    $("conflict-count").textContent = count > 0 ? String(count) : "";
  }

  async function resolve(id, take) {
    const envelope = open.get(id);
    if (!envelope || pending.has(id)) return;
    pending.add(id);
    errors.delete(id);
    pressed = { id, take };
    place(envelope); // buttons disabled while the hub decides
    try {
      await hub.resolveConflict(envelope, take, { keep: keepFor(envelope.data.name) });
      // The conflict record's push takes the row away (drop clears pending).
    } catch (failure) {
      pending.delete(id);
      errors.set(id, explain(failure));
      if (open.has(id)) place(open.get(id));
    }
  }

  function explain(failure) {
    switch (failure?.code) {
      case "forbidden":
        return `Not allowed: ${hub.role ? `the ${hub.role} role` : "this token"} may not resolve conflicts. `
          + "Sign in with a staff or admin token (Token…).";
      case "conflict":
        return "This conflict changed meanwhile (settled elsewhere?). The row shows it as it is now; nothing was written.";
      default:
        return `Not resolved: ${failure?.message ?? failure}${failure?.code ? ` (${failure.code})` : ""}`;
    }
  }

  return {
    tick() {
      for (const node of list.querySelectorAll(".ago[data-at]")) node.textContent = ago(Number(node.dataset.at));
    },
  };
}

const lostFocus = () => document.activeElement === document.body || document.activeElement === null;
const ago = (time) => `${duration(Date.now() - time)} ago`;

/** One side of a conflict: JSON as written, or "none" where there is no
 *  value (for the whole record: no record). */
function side(label, value, whole, key) {
  const shown = value === null || value === undefined
    ? el("span", { class: "none" }, whole ? "no record" : "none")
    : el("code", {}, JSON.stringify(value, null, whole && typeof value === "object" ? 2 : undefined));
  return el("div", { class: `side ${key}` }, el("dt", {}, label), el("dd", {}, shown));
}
