// Small DOM and formatting helpers shared by the board's modules.

export const $ = (id) => document.getElementById(id);

/** An element with attributes (`class`, `dataset`, `on…` listeners; false,
 *  null and undefined leave an attribute out) and children. */
export const el = (tag, props = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value === true ? "" : value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
};

/** "42 s", "3 min 4 s", "2 h 5 min", "3 d 4 h". */
export function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  const h = Math.floor(m / 60);
  return h < 48 ? `${h} h ${m % 60} min` : `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** A record's progress as steps: one per stage of `track`, those passed
 *  done, the current one marked (a side exit such as cancelled marks the
 *  step it left from as stopped). A `<progress>` (value = the step's index,
 *  max = the last) carries it for screen readers and scripts; the steps are
 *  what the eye reads. `label` turns a stage into words. */
export function progressSteps(track, stage, before, what, label) {
  const onTrack = track.indexOf(stage) >= 0;
  const position = onTrack ? track.indexOf(stage) : Math.max(0, track.indexOf(before));
  const stopped = !onTrack && stage !== undefined && stage !== null;
  return el("div", { class: "steps", "data-steps": track.length },
    el("progress", {
      class: "sr-only", max: track.length - 1, value: position,
      "aria-label": `${what} progress`,
      "aria-valuetext": `${label(stage)}: step ${position + 1} of ${track.length}`,
    }),
    el("ol", { "aria-hidden": "true" }, ...track.map((step, index) => el("li", {
      "data-step": step,
      "data-state": index < position ? "done" : index > position ? "todo" : stopped ? "stopped" : "current",
    }, el("span", { class: "label" }, label(step))))));
}

/** Makes `target` look like `source` (a freshly built copy of it) while
 *  keeping every node that stays: attributes are copied, text is changed
 *  where it differs, children of the same tag and class are updated in
 *  place, others inserted or removed. So the element, its buttons, the
 *  keyboard focus and a press in flight survive an update that changes
 *  nothing they show. Listeners stay those of the kept nodes: handlers must
 *  read what they act on from the DOM, not from when they were made.
 *  `keep(node)` true leaves a node as it is; an `<img>` showing the same
 *  photo (`data-sha`) is always kept. */
export function morph(target, source, keep = () => false) {
  for (const { name } of [...target.attributes]) if (!source.hasAttribute(name)) target.removeAttribute(name);
  for (const { name, value } of [...source.attributes]) if (target.getAttribute(name) !== value) target.setAttribute(name, value);
  const wanted = [...source.childNodes];
  let index = 0;
  for (const node of wanted) {
    let match = null;
    for (let at = index; at < target.childNodes.length; at++) {
      if (sameKind(target.childNodes[at], node)) { match = target.childNodes[at]; break; }
    }
    if (match) {
      while (target.childNodes[index] !== match) target.childNodes[index].remove();
      if (match.nodeType === Node.TEXT_NODE) { if (match.data !== node.data) match.data = node.data; }
      else if (!keep(match) && !(match.tagName === "IMG" && match.dataset.sha === node.dataset.sha)) morph(match, node, keep);
    } else {
      target.insertBefore(node, target.childNodes[index] ?? null);
    }
    index++;
  }
  while (target.childNodes.length > index) target.lastChild.remove();
  return target;
}

function sameKind(a, b) {
  if (a.nodeType !== b.nodeType) return false;
  if (a.nodeType !== Node.ELEMENT_NODE) return true;
  const key = (node) => `${node.tagName}.${node.classList[0] ?? ""}.${node.dataset.step ?? ""}`;
  return key(a) === key(b);
}

/** When a workflow record entered its current stage (ms, hub clock): its
 *  last history entry, else its update or creation time, else `now()`. */
export function stageSince(envelope, now) {
  const history = envelope.data?.history;
  const last = Array.isArray(history) && history.length ? history[history.length - 1] : null;
  return typeof last?.time === "number" ? last.time : envelope.updated ?? envelope.created ?? now();
}

/** The stage a record left for its current one (for the steps of a
 *  cancelled order: the step it stopped at). */
export function stageBefore(envelope) {
  const history = envelope.data?.history;
  const last = Array.isArray(history) && history.length ? history[history.length - 1] : null;
  return last?.from ?? null;
}

export const isSHA = (text) => typeof text === "string" && /^[0-9a-f]{64}$/.test(text);

/** The widths the hub makes smaller copies of a photo in
 *  (`GET /v1/blobs/<sha>?w=N`). */
export const PHOTO_WIDTHS = [64, 128, 256, 512, 1024];

/** The smallest of `PHOTO_WIDTHS` at least `cssWidth` × `ratio` device
 *  pixels wide; null when none is (then the photo as uploaded). */
export function photoWidth(cssWidth, ratio = globalThis.devicePixelRatio || 1) {
  const needed = Math.ceil(Math.max(1, Number(cssWidth) || 0) * Math.max(1, Number(ratio) || 1));
  return PHOTO_WIDTHS.find((width) => width >= needed) ?? null;
}

/** `setPhoto(img, sha, { full })` for a page on `hub`: the photo at the
 *  width it is drawn, `?w=` the smallest thumbnail at least the `<img>`'s
 *  CSS width (laid out, else its `width` attribute, which cards set to the
 *  box they draw it in) × devicePixelRatio; `full: true` for the photo as
 *  uploaded (only where a page shows it large). A plain URL on an open hub;
 *  with a token, the photo fetched once with it (an `<img>` cannot send
 *  one) and shown from an object URL. `setPhoto.forget()` drops what was
 *  fetched (another token: another user's access). */
export function photoSetter(hub) {
  const urls = new Map(); // URL → Promise of an object URL (null: failed, tried again next time)
  const setPhoto = (img, sha, { full = false } = {}) => {
    if (!isSHA(sha)) return;
    const laid = img.isConnected ? img.getBoundingClientRect().width : 0;
    const drawn = laid > 0 ? laid : Number(img.getAttribute("width"));
    const width = full ? null : photoWidth(drawn || PHOTO_WIDTHS[PHOTO_WIDTHS.length - 1]);
    const src = width ? `/v1/blobs/${sha}?w=${width}` : `/v1/blobs/${sha}`;
    img.dataset.sha = sha;
    if (!hub.token) { img.src = src; return; }
    if (!urls.has(src)) {
      // An <img> says it takes WebP; a fetch must say so itself.
      const headers = { Authorization: `Bearer ${hub.token}`, Accept: "image/webp,image/jpeg;q=0.9,*/*;q=0.5" };
      urls.set(src, fetch(src, { headers })
        .then((response) => (response.ok ? response.blob() : Promise.reject(new Error(String(response.status)))))
        .then((blob) => URL.createObjectURL(blob))
        .catch(() => { urls.delete(src); return null; }));
    }
    urls.get(src).then((url) => { if (url && img.dataset.sha === sha) img.src = url; });
  };
  setPhoto.forget = () => urls.clear();
  return setPhoto;
}
