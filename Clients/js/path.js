// Record paths (Protocol/PROTOCOL.md, "Names, paths, limits"): keys
// separated by ".", array indexes in brackets: `stage`, `items[2].qty`.
// Pure functions over plain JSON values; nothing here touches a socket.

/** Splits a path into segments: strings (keys) and numbers (indexes).
 *  Throws a TypeError for text the hub would refuse as bad_path. */
export function parsePath(text) {
  if (typeof text !== "string" || text.length === 0) throw new TypeError("a path is a non-empty string");
  const segments = [];
  let i = 0;
  const readKey = () => {
    const start = i;
    while (i < text.length && !".[]".includes(text[i])) {
      if (text.charCodeAt(i) < 0x20 || text.charCodeAt(i) === 0x7f) throw new TypeError(`control character in path at ${i}`);
      i += 1;
    }
    if (i === start) throw new TypeError(`empty key in path at ${start}`);
    segments.push(text.slice(start, i));
  };
  const readIndex = () => {
    const close = text.indexOf("]", i);
    const digits = close < 0 ? "" : text.slice(i + 1, close);
    if (!/^(0|[1-9][0-9]{0,6})$/.test(digits)) throw new TypeError(`bad index in path at ${i}`);
    segments.push(Number(digits));
    i = close + 1;
  };
  if (text[0] === "[") readIndex(); else readKey();
  while (i < text.length) {
    if (text[i] === ".") { i += 1; readKey(); }
    else if (text[i] === "[") readIndex();
    else throw new TypeError(`unexpected '${text[i]}' in path at ${i}`);
  }
  return segments;
}

/** The value at `path` in `value`, or undefined when there is none. */
export function valueAt(value, path) {
  let node = value;
  for (const segment of typeof path === "string" ? parsePath(path) : path) {
    if (typeof segment === "number") {
      if (!Array.isArray(node) || segment >= node.length) return undefined;
    } else if (node === null || typeof node !== "object" || Array.isArray(node) || !Object.hasOwn(node, segment)) {
      return undefined;
    }
    node = node[segment];
  }
  return node;
}

/** A copy of `root` with `value` at `path`: missing parent objects are
 *  created, an index one past the end appends (as the hub does). */
export function withValueAt(root, path, value) {
  const segments = typeof path === "string" ? parsePath(path) : path;
  if (segments.length === 0) return clone(value);
  const copy = root === undefined || root === null ? {} : clone(root);
  let node = copy;
  segments.forEach((segment, index) => {
    const last = index === segments.length - 1;
    if (last) { node[segment] = clone(value); return; }
    let next = node[segment];
    if (next === undefined || next === null || typeof next !== "object") next = node[segment] = {};
    node = next;
  });
  return copy;
}

/** A copy of `root` without the value at `path` (array elements after it
 *  move down); unchanged when there is no value there. */
export function withoutValueAt(root, path) {
  const segments = typeof path === "string" ? parsePath(path) : path;
  if (segments.length === 0 || valueAt(root, segments) === undefined) return root;
  const copy = clone(root);
  const parent = segments.length === 1 ? copy : valueAt(copy, segments.slice(0, -1));
  const last = segments[segments.length - 1];
  if (Array.isArray(parent)) parent.splice(last, 1); else delete parent[last];
  return copy;
}

/** How two paths relate: "same", "ancestor" (a is above b), "descendant"
 *  (a is below b) or null when neither is a prefix of the other, segment by
 *  segment (`stage` and `stagehand` are unrelated). */
export function relation(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i += 1) if (a[i] !== b[i]) return null;
  if (a.length === b.length) return "same";
  return a.length < b.length ? "ancestor" : "descendant";
}

export function clone(value) {
  return value === undefined ? undefined : structuredClone(value);
}
