// Overview: every queue with its counts, oldest waiting age, the last
// hour as a small chart, its limits and whether it is paused; the server
// or cluster in one line; refreshed live.
import { ServerMode, type GetClusterResponse, type Outbox, type Queue, type QueueEvents, type QueueLimits } from "@tenure/client";
import { api, calls, may, message, namespaces } from "../api";
import { h, swap } from "../dom";
import { count, durationMs, span } from "../format";
import { live } from "../live";
import { say } from "../ui";

/** queueHref is the address of a queue's page. */
export function queueHref(namespace: string, queue: string): string {
  return `#/queue/${encodeURIComponent(namespace)}/${encodeURIComponent(queue)}`;
}

/**
 * limitsText is a queue's flow control in a few words: "at most 5 leases
 * at once · 2/s, bursts of 4 · per key: at most 1 lease at once, in
 * order · fair", or "none".
 */
export function limitsText(l: QueueLimits | undefined): string {
  const parts: string[] = [];
  if (l?.maxConcurrency) {
    parts.push(`at most ${count(l.maxConcurrency)} lease${l.maxConcurrency === 1 ? "" : "s"} at once`);
  }
  if (l?.rate) {
    parts.push(`${l.rate.toLocaleString(undefined, { maximumFractionDigits: 3 })}/s, bursts of ${count(l.burst)}`);
  }
  const perKey: string[] = [];
  if (l?.keyMaxConcurrency) {
    perKey.push(`at most ${count(l.keyMaxConcurrency)} lease${l.keyMaxConcurrency === 1 ? "" : "s"} at once`);
  }
  if (l?.keyRate) {
    perKey.push(`${l.keyRate.toLocaleString(undefined, { maximumFractionDigits: 3 })}/s, bursts of ${count(l.keyBurst)}`);
  }
  if (l?.keyOrdered) {
    perKey.push("in order");
  }
  if (perKey.length) {
    parts.push(`per key: ${perKey.join(", ")}`);
  }
  if (l?.fair) {
    parts.push("fair");
  }
  if (l?.keyWeights.length) {
    parts.push(`weights ${l.keyWeights.map((w) => `${w.key} ×${w.weight}`).join(", ")}`);
  }
  return parts.length ? parts.join(" · ") : "none";
}

/** render draws the overview into main; it returns what stops it. */
export async function render(main: HTMLElement): Promise<() => void> {
  const summary = h("section", { class: "cards", "aria-label": "Summary" });
  const table = h("div", { class: "scroll" });
  const outboxes = h("section", { "aria-label": "Outboxes" });
  const rates = new DrainRates();
  const { control, stop } = live(async () => {
    try {
      const [queues, cluster, relayed] = await Promise.all([listQueues(), describe(), listOutboxes()]);
      swap(summary, summaryCards(queues, cluster));
      swap(table, queueTable(queues));
      swap(outboxes, relayed.length ? [h("h2", {}, "Outboxes"), h("div", { class: "scroll" }, outboxTable(relayed, rates))] : []);
    } catch (err) {
      say(message(err), "error");
    }
  }, { filter: {} });
  main.replaceChildren(h("div", { class: "head" }, h("h1", {}, "Overview"), control), summary, h("h2", {}, "Queues"), table, outboxes);
  return stop;
}

/** listOutboxes lists the outboxes the server relays, if the token may. */
async function listOutboxes(): Promise<Outbox[]> {
  if (!may(calls.listOutboxes).ok) {
    return [];
  }
  return (await api.outbox.listOutboxes({})).outboxes;
}

/**
 * DrainRates turns each outbox's count of rows relayed into rows per
 * second, from one refresh to the next.
 */
class DrainRates {
  private last = new Map<string, { relayed: bigint; at: number }>();

  rate(o: Outbox): number | undefined {
    const now = performance.now();
    const prev = this.last.get(o.name);
    this.last.set(o.name, { relayed: o.relayed, at: now });
    if (!prev || now <= prev.at) {
      return undefined;
    }
    return (Number(o.relayed - prev.relayed) * 1000) / (now - prev.at);
  }
}

/**
 * outboxTable is the outboxes the server relays (docs/guides/outbox.md):
 * rows waiting and the oldest's age, the drain rate, failed rows, and
 * the relay's last error.
 */
function outboxTable(outboxes: Outbox[], rates: DrainRates): HTMLElement {
  return h("table", { class: "outboxes" },
    h("caption", { class: "sr-only" }, "Outboxes this server relays"),
    h("thead", {}, h("tr", {}, ["Outbox", "Rows waiting", "Oldest", "Drain rate", "Relayed", "Failed rows", "Relay"].map((x) =>
      h("th", { scope: "col", class: x === "Outbox" || x === "Relay" ? "" : "num" }, x)))),
    h("tbody", {}, outboxes.map((o) => {
      const age = durationMs(o.oldestRowAge);
      const rate = rates.rate(o);
      return h("tr", { "data-outbox": o.name },
        h("th", { scope: "row" }, o.name, h("span", { class: "muted" }, ` (${o.database} ${o.table})`)),
        h("td", { class: "num", "data-count": "rows" }, count(o.rows)),
        h("td", { class: "num" }, o.rows && age !== undefined ? span(age) : "—"),
        h("td", { class: "num" }, rate === undefined ? "—" : `${rate.toLocaleString(undefined, { maximumFractionDigits: 1 })}/s`),
        h("td", { class: "num", "data-count": "relayed" }, count(o.relayed)),
        h("td", { class: `num${o.failedRows ? " c-failed" : ""}`, "data-count": "failed" }, count(o.failedRows)),
        h("td", {}, o.lastError ? h("span", { class: "badge paused", title: o.lastError }, "retrying") : "relaying"));
    })));
}

/** listQueues lists the queues the token may see. */
async function listQueues(): Promise<Queue[]> {
  const out: Queue[] = [];
  for (const ns of namespaces()) {
    const res = await api.queues.listQueues({ namespace: ns });
    out.push(...res.queues);
  }
  return out;
}

/** describe is the cluster, or a string saying why it is not shown. */
async function describe(): Promise<GetClusterResponse | string> {
  const p = may(calls.getCluster);
  if (!p.ok) {
    return p.reason;
  }
  return api.admin.getCluster({});
}

function summaryCards(queues: Queue[], cluster: GetClusterResponse | string): HTMLElement[] {
  const total = { waiting: 0n, leased: 0n, committed: 0n, completed: 0n, failed: 0n, dead: 0n };
  let paused = 0;
  for (const q of queues) {
    for (const k of Object.keys(total) as (keyof typeof total)[]) {
      total[k] += q.tasks?.[k] ?? 0n;
    }
    if (q.paused) {
      paused++;
    }
  }
  const card = (title: string, ...body: (string | Node)[]) => h("div", { class: "card" }, h("h2", {}, title), h("p", {}, ...body));
  let server: HTMLElement;
  if (typeof cluster === "string") {
    server = card("Server", h("span", { class: "muted" }, `not shown: ${cluster}`));
  } else if (cluster.mode === ServerMode.EMBEDDED) {
    server = card("Server", "embedded: one process on its own log");
  } else {
    const active = cluster.nodes.filter((n) => n.active).length;
    const lock = cluster.coordinator;
    server = card("Cluster",
      h("a", { href: "#/cluster" }, `${active} of ${cluster.nodes.length} nodes active`),
      `, ${cluster.partitions.length} partitions; coordinator `,
      lock ? `${lock.holder} (epoch ${lock.epoch})` : "none", `; answered by ${cluster.nodeId}`);
  }
  return [
    server,
    card("Queues", `${queues.length} queue${queues.length === 1 ? "" : "s"}`, paused ? `, ${paused} paused` : ""),
    card("Tasks", `${count(total.waiting)} waiting · ${count(total.leased + total.committed)} running · ${count(total.failed)} failed · ${count(total.dead)} dead · ${count(total.completed)} completed`),
  ];
}

const stateCols = ["blocked", "waiting", "leased", "committed", "completed", "failed", "dead"] as const;

function queueTable(queues: Queue[]): HTMLElement {
  if (queues.length === 0) {
    return h("p", { class: "muted" }, "No queues yet: submit a task to create one.");
  }
  return h("table", { class: "queues" },
    h("caption", { class: "sr-only" }, "Queues with their tasks by state"),
    h("thead", {}, h("tr", {},
      h("th", { scope: "col" }, "Queue"),
      stateCols.map((c) => h("th", { scope: "col", class: "num" }, c)),
      h("th", { scope: "col", class: "num" }, "Oldest waiting"),
      h("th", { scope: "col" }, "Last hour"),
      h("th", { scope: "col" }, "Limits"),
      h("th", { scope: "col" }, "State"))),
    h("tbody", {}, queues.map((q) => {
      const age = durationMs(q.oldestWaitingAge);
      return h("tr", { "data-queue": `${q.namespace}/${q.queue}` },
        h("th", { scope: "row" }, h("a", { href: queueHref(q.namespace, q.queue), "data-key": `q-${q.namespace}/${q.queue}` },
          h("span", { class: "ns" }, q.namespace + "/"), q.queue)),
        stateCols.map((c) => h("td", { class: `num${c === "failed" && q.tasks?.failed ? " c-failed" : ""}`, "data-count": c }, count(q.tasks?.[c]))),
        h("td", { class: "num" }, age === undefined ? "—" : span(age)),
        h("td", {}, sparkline(q.perMinute, q.lastHour)),
        h("td", { "data-limits": "" }, limitsText(q.limits)),
        h("td", {}, q.paused ? h("span", { class: "badge paused" }, "paused") : "running",
          q.paused && q.pausedPartitions < q.partitions ? ` (${q.pausedPartitions} of ${q.partitions} partitions)` : ""));
    })));
}

const svgNS = "http://www.w3.org/2000/svg";

/**
 * sparkline draws the completions (and failures) of each of the last 60
 * minutes as bars, with the hour's totals as its accessible name.
 */
export function sparkline(perMinute: QueueEvents[], hour: QueueEvents | undefined): SVGSVGElement {
  const w = 120;
  const ht = 24;
  const top = perMinute.reduce((m, e) => Math.max(m, Number(e.completed + e.failed), Number(e.submitted)), 1);
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${ht}`);
  svg.setAttribute("width", String(w));
  svg.setAttribute("height", String(ht));
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  const name = `last hour: ${count(hour?.submitted)} submitted, ${count(hour?.completed)} completed, ${count(hour?.failed)} failed`;
  svg.setAttribute("aria-label", name);
  const title = document.createElementNS(svgNS, "title");
  title.textContent = name;
  svg.appendChild(title);
  const bw = w / 60;
  perMinute.forEach((e, i) => {
    const done = Number(e.completed);
    const bad = Number(e.failed);
    const x = i * bw;
    if (done > 0) {
      const r = bar(x, ht - (done / top) * ht, bw, (done / top) * ht, "done");
      svg.appendChild(r);
    }
    if (bad > 0) {
      const y = ht - ((done + bad) / top) * ht;
      svg.appendChild(bar(x, y, bw, (bad / top) * ht, "bad"));
    }
  });
  return svg;
}

function bar(x: number, y: number, w: number, height: number, cls: string): SVGRectElement {
  const r = document.createElementNS(svgNS, "rect");
  r.setAttribute("x", x.toFixed(2));
  r.setAttribute("y", y.toFixed(2));
  r.setAttribute("width", Math.max(w - 0.4, 0.5).toFixed(2));
  r.setAttribute("height", Math.max(height, 0.5).toFixed(2));
  r.setAttribute("class", cls);
  return r;
}
