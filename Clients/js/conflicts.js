// Conflicts an offline mirror recorded and published to the hub as
// `conflicts/<id>` records (docs/mirror.md, "Conflicts"), and the one atomic
// `write` that resolves one from anywhere. Pure functions over plain JSON:
// nothing here touches a socket.
//
// A conflict record's data:
//   {"name","field","local","hub","base","policy","created","resolved":false,"mirror"}
// `field` is a path in record `name`, or "*" for the whole record (then
// `local` null means the mirror deleted the record).

export const CONFLICT_PREFIX = "conflicts/";

/** Whether an envelope is a conflict still waiting for a side. */
export function isOpenConflict(envelope) {
  return typeof envelope?.name === "string" && envelope.name.startsWith(CONFLICT_PREFIX)
    && envelope.data?.resolved === false && typeof envelope.data.name === "string" && typeof envelope.data.field === "string";
}

/** The id of `conflicts/<id>`. */
export const conflictId = (name) => name.slice(CONFLICT_PREFIX.length);

/**
 * The ops of the atomic `write` that settles a conflict by keeping one side:
 * 1. take "local": the record gets the mirror's value — a `set` at `field`
 *    (a `delete` of the field when `local` is null), or for field "*" a
 *    `set` of the whole record (a `delete` of it when `local` is null); take "hub": nothing, the hub already has its value;
 * 2. `conflicts/<id>` gets `resolved: true` and `take`.
 *
 * The mirror that recorded it sees the conflict resolved on the hub and
 * closes its own row (writing `local` itself only if the hub does not
 * already hold it), so the dashboard, the CLI and REST all settle it alike.
 *
 * @param {object} conflict the conflict's envelope `{name: "conflicts/<id>", version, data}`
 * @param {"local"|"hub"} take the side to keep
 * @param {object} [options]
 * @param {string[]} [options.keep] fields a whole-record `set` leaves as the
 *   hub has them: a workflow record's stage, `history` and `owner` only move
 *   by `advance` (a `set` that changes them is refused with `use_advance`)
 * @returns {object[]} the ops, for `hub.write(ops)`
 */
export function conflictResolution(conflict, take, { keep = [] } = {}) {
  if (take !== "local" && take !== "hub") throw new TypeError(`take "local" or "hub", not ${JSON.stringify(take)}`);
  const { name, field, local } = conflict?.data ?? {};
  if (typeof name !== "string" || typeof field !== "string") throw new TypeError("not a conflict record: it needs name and field");
  const ops = [];
  if (take === "local") {
    // local null: the mirror has no value there (its side removed the
    // field), so the field goes — as `tally mirror conflicts resolve --take local` does.
    if (field !== "*") ops.push(local === null || local === undefined
      ? { op: "delete", name, path: field }
      : { op: "set", name, path: field, value: local });
    else if (local === null || local === undefined) ops.push({ op: "delete", name });
    else if (typeof local === "object" && !Array.isArray(local)) {
      const data = { ...local };
      for (const key of keep) delete data[key];
      ops.push({ op: "set", name, data });
    } else throw new TypeError(`the whole-record local value of ${conflict.name} is not an object`);
  }
  // The version guard: a conflict settled elsewhere meanwhile is refused
  // with `conflict` instead of being settled twice, maybe the other way.
  const closing = { op: "set", name: conflict.name, path: "resolved", value: true };
  if (Number.isInteger(conflict.version)) closing.version = conflict.version;
  ops.push(closing, { op: "set", name: conflict.name, path: "take", value: take });
  return ops;
}
