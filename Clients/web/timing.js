// Stage timing drawn from a workflow's stats record (`stats/orders`,
// `stats/intake`; PROTOCOL.md, "Stats records"), never from the records
// themselves: per stage the records in it and, for the open stages, how long
// they have waited there on average (a bar that grows each second with no
// write, from `enteredSum`), and per terminal stage the records finished per
// hour over the last day (24 bars, from `finished`). Plain SVG; every chart
// has a text alternative with its figures.

import { el, duration } from "./ui.js";

const SVG = "http://www.w3.org/2000/svg";
const HOUR = 3_600_000;
const HOURS = 24;
/** Wait scales: the smallest that holds the longest average, so a bar
 *  grows as its records wait instead of always filling the width. */
const SCALES = [60_000, 5 * 60_000, 15 * 60_000, HOUR, 4 * HOUR, 24 * HOUR, 7 * 24 * HOUR, 30 * 24 * HOUR];

const svg = (tag, attributes = {}, ...children) => {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  node.append(...children);
  return node;
};
const titled = (text) => svg("title", {}, text);

/** The records waiting in `stage` and their average wait at `now` (ms,
 *  hub clock), or null when none wait. */
export function waits(stats, stage, now) {
  const count = stats?.counts?.[stage] ?? 0;
  const time = stats?.stageTime?.[stage];
  if (!count || typeof time?.enteredSum !== "number") return null;
  return { count, averageMs: Math.max(0, now - time.enteredSum / count) };
}

/** Finished per hour for `stage`: 24 counts, the last for the hour holding
 *  `now` (the record's day ends with its newest finish, maybe hours ago). */
export function perHour(stats, stage, now) {
  const finished = stats?.finished;
  const counts = new Array(HOURS).fill(0);
  if (!finished || !Array.isArray(finished[stage]) || typeof finished.hour !== "number") return counts;
  const current = Math.floor(now / HOUR) * HOUR;
  finished[stage].forEach((count, index) => {
    const hour = finished.hour - (HOURS - 1 - index) * HOUR;
    const at = HOURS - 1 - Math.round((current - hour) / HOUR);
    if (at >= 0 && at < HOURS) counts[at] = count;
  });
  return counts;
}

/**
 * The timing of one workflow, drawn into `list` (the panel's `<dl>`: one
 * `[data-stage]` group per stage with its `.count`) and a figure after it
 * for the finished per hour. `show` takes a new stats record; `tick` redraws
 * the waits for the time now.
 */
export function createTiming(list, { label = (stage) => stage, now = () => Date.now(), noun = "records" } = {}) {
  let stages = [];
  let terminal = new Set();
  let stats = null;
  const figure = el("figure", { class: "per-hour", "data-workflow": list.id });
  list.after(figure);

  function stageGroup(stage) {
    let group = list.querySelector(`:scope > [data-stage="${CSS.escape(stage)}"]`);
    if (!group || group.classList.contains("terminal") !== terminal.has(stage)) {
      const bars = terminal.has(stage) ? null : svg("svg", { class: "wait", viewBox: "0 0 100 10", preserveAspectRatio: "none", role: "img" },
        titled(""), svg("rect", { class: "average", x: 0, y: 0, height: 10, width: 0 }));
      group = el("div", { "data-stage": stage, class: terminal.has(stage) ? "terminal" : "open" },
        el("dt", {}, label(stage)),
        el("dd", {}, el("span", { class: "count" }, "0"), el("span", { class: "waits" }), bars));
    }
    return group;
  }

  function drawWaits() {
    const at = now();
    const figures = stages.filter((stage) => !terminal.has(stage)).map((stage) => [stage, waits(stats, stage, at)]);
    const most = Math.max(0, ...figures.map(([, wait]) => wait?.averageMs ?? 0));
    const scale = SCALES.find((limit) => most <= limit) ?? most;
    list.dataset.scaleMs = String(scale);
    for (const [stage, wait] of figures) {
      const group = list.querySelector(`:scope > [data-stage="${CSS.escape(stage)}"]`);
      if (!group) continue;
      const average = wait ? Math.round(wait.averageMs) : 0;
      group.dataset.averageMs = String(average);
      const waitsText = group.querySelector(".waits");
      waitsText.textContent = wait ? `⌀ ${duration(average)}` : "";
      waitsText.title = wait ? "average wait in this stage" : "";
      const chart = group.querySelector("svg.wait");
      chart.querySelector(".average").setAttribute("width", (Math.min(average, scale) / scale * 100).toFixed(2));
      const said = wait ? `${label(stage)}: ${wait.count} ${noun} waiting ${duration(average)} on average (bar scale ${duration(scale)})`
        : `${label(stage)}: none waiting`;
      chart.setAttribute("aria-label", said);
      chart.querySelector("title").textContent = said;
    }
  }

  function drawPerHour() {
    const at = now();
    const ends = stages.filter((stage) => terminal.has(stage));
    const series = ends.map((stage) => [stage, perHour(stats, stage, at)]);
    const peak = Math.max(1, ...Array.from({ length: HOURS }, (_, index) => series.reduce((sum, [, counts]) => sum + counts[index], 0)));
    const totals = series.map(([stage, counts]) => [stage, counts.reduce((sum, count) => sum + count, 0)]);
    const said = `Finished per hour over the last 24 hours: ${totals.map(([stage, total]) => `${label(stage)} ${total}`).join(", ") || "none"}`
      + `; this hour ${series.map(([stage, counts]) => `${label(stage)} ${counts[HOURS - 1]}`).join(", ")}`;
    const current = Math.floor(at / HOUR) * HOUR;
    const bars = [];
    for (let index = 0; index < HOURS; index++) {
      let y = 40;
      const start = new Date(current - (HOURS - 1 - index) * HOUR);
      const hour = `${String(start.getHours()).padStart(2, "0")}:00`;
      const group = svg("g", { "data-hour": index - (HOURS - 1) },
        titled(`${hour}: ${series.map(([stage, counts]) => `${counts[index]} ${label(stage)}`).join(", ")}`));
      for (const [stage, counts] of series) {
        if (!counts[index]) continue;
        const height = counts[index] / peak * 38;
        y -= height;
        group.append(svg("rect", { class: "bar", "data-stage": stage, x: index * 10 + 1, y: y.toFixed(2), width: 8, height: height.toFixed(2) }));
      }
      bars.push(group);
    }
    const chart = svg("svg", { class: "hours", viewBox: `0 0 ${HOURS * 10} 40`, preserveAspectRatio: "none", role: "img", "aria-label": said },
      titled(said), svg("line", { class: "axis", x1: 0, y1: 39.5, x2: HOURS * 10, y2: 39.5 }), ...bars);
    const legend = totals.map(([stage, total]) => el("span", { class: "finished", "data-stage": stage },
      el("span", { class: "swatch", "aria-hidden": "true" }), `${label(stage)} `, el("span", { class: "total" }, String(total))));
    figure.replaceChildren(el("figcaption", {}, el("span", { class: "caption" }, "Last 24 h"), ...legend), chart);
    figure.dataset.hour = String(current);
  }

  return {
    show(newStages, newTerminal, data) {
      stages = newStages;
      terminal = new Set(newTerminal);
      stats = data ?? null;
      const groups = stages.map((stage) => stageGroup(stage));
      list.replaceChildren(...groups);
      for (const group of groups) {
        group.querySelector(".count").textContent = String(stats?.counts?.[group.dataset.stage] ?? 0);
      }
      drawWaits();
      drawPerHour();
    },
    tick() {
      drawWaits();
      const hour = Math.floor(now() / HOUR) * HOUR;
      if (figure.dataset.hour !== String(hour)) drawPerHour();
    },
  };
}
