// Applying pushes (Protocol/PROTOCOL.md, "Pushes") to the state a
// subscription keeps: pure functions over plain JSON, no socket.

import { parsePath, valueAt, withValueAt, withoutValueAt, relation, clone } from "./path.js";

/** A record envelope after `change` (null once deleted). */
export function applyRecordChange(envelope, change) {
  if (change.kind === "delete") return null;
  const base = envelope ?? { name: change.name, created: change.time, data: {} };
  const next = { ...base, version: change.version, seq: change.seq, updated: change.time };
  if (!envelope && change.version === 1) next.created = change.time;
  switch (change.kind) {
    case "set": next.data = clone(change.data); break;
    case "setPath": next.data = withValueAt(base.data, change.path, change.value); break;
    case "deletePath": next.data = withoutValueAt(base.data, change.path); break;
    default: return envelope; // a kind this client does not know: keep what we had
  }
  return next;
}

/** A list envelope after `change` (null once deleted). */
export function applyListChange(envelope, change, paging = null) {
  if (change.kind === "delete") return null;
  const entries = envelope ? [...envelope.entries] : [];
  // While a long list is paged in (`paging`: {loaded, cursor}), only the
  // loaded entries are here: a change past them is in a page still to come.
  // An entry added right after the loaded ones is in the next page while the
  // cursor's entry (the last loaded) is there; once that entry was removed
  // nobody can tell, and the paging starts again (`paging.restart`).
  const loaded = (index) => !paging || index < paging.loaded || (index === paging.loaded && !paging.cursor);
  switch (change.kind) {
    case "addEntry":
      if (paging && paging.cursor && paging.cursorGone && change.index === paging.loaded) paging.restart = true;
      if (!loaded(change.index)) break;
      entries.splice(change.index, 0, change.entry);
      if (paging) paging.loaded += 1;
      break;
    case "removeEntry":
      for (const index of [...change.indexes].sort((a, b) => b - a)) {
        if (paging && index >= paging.loaded) continue;
        entries.splice(index, 1);
        if (paging) {
          if (index === paging.loaded - 1) paging.cursorGone = true;
          paging.loaded -= 1;
        }
      }
      break;
    case "setEntries": entries.splice(0, entries.length, ...change.entries); break;
    default: return envelope;
  }
  return { list: change.list, version: change.version, seq: change.seq, entries };
}

/** The value at a subscribed path after a change to its record. */
export function applyPathChange(value, segments, change) {
  switch (change.kind) {
    case "delete": return undefined;
    case "set": return clone(valueAt(change.data, segments));
    case "setPath":
    case "deletePath": {
      const changed = parsePath(change.path);
      const how = relation(changed, segments);
      if (how === null) return value;
      if (how === "same" || how === "ancestor") {
        // The change replaced everything at and under our path.
        return change.kind === "setPath" ? clone(valueAt(change.value, segments.slice(changed.length))) : undefined;
      }
      const rest = changed.slice(segments.length); // below our path
      return change.kind === "setPath" ? withValueAt(value, rest, change.value) : withoutValueAt(value, rest);
    }
    default: return value;
  }
}
