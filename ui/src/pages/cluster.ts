// Cluster: the coordinator lock, the nodes and their last heartbeat, the
// partition map (owners and epochs). An embedded server says it is one.
import { ServerMode, type GetClusterResponse } from "@tenure/client";
import { api, message } from "../api";
import { h, swap } from "../dom";
import { durationMs, span } from "../format";
import { live } from "../live";
import { say, time } from "../ui";
import { queueHref } from "./overview";

/** Partitions listed at most, after the filter. */
const maxRows = 500;

/** render draws the cluster into main. */
export async function render(main: HTMLElement): Promise<() => void> {
  const body = h("div");
  const text = h("input", { id: "pfilter", "data-key": "pfilter", type: "search", placeholder: "namespace, queue or node", autocomplete: "off" });
  let last: GetClusterResponse | undefined;
  const draw = () => {
    if (!last) {
      return;
    }
    swap(body, clusterView(last, text.value.trim().toLowerCase(), text));
  };
  text.addEventListener("input", draw);
  const { control, stop } = live(async () => {
    try {
      last = await api.admin.getCluster({});
      draw();
    } catch (err) {
      say(message(err), "error");
    }
  });
  main.replaceChildren(h("div", { class: "head" }, h("h1", {}, "Cluster"), control), body);
  return stop;
}

function clusterView(c: GetClusterResponse, needle: string, filter: HTMLInputElement): (HTMLElement | null)[] {
  if (c.mode !== ServerMode.CLUSTER) {
    return [h("p", { id: "embedded" }, "This server is embedded: one process, one partition, its log in its data directory. Start it with --mysql to run a cluster (docs/guides/cluster-mode.md).")];
  }
  const lock = c.coordinator;
  const parts = c.partitions.filter((p) => !needle || [p.namespace, p.queue, p.owner].some((s) => s.toLowerCase().includes(needle)));
  return [
    h("section", { class: "cards", "aria-label": "Coordinator" },
      h("div", { class: "card", id: "lock" }, h("h2", {}, "Coordinator lock"),
        lock ? h("p", {}, `held by `, h("strong", {}, lock.holder), ` · epoch ${lock.epoch} · ${lock.live ? "live" : "lapsed"} · expires `, time(lock.expiresAt))
          : h("p", {}, "no node holds it")),
      h("div", { class: "card" }, h("h2", {}, "This node"), h("p", {}, c.nodeId))),
    h("h2", {}, "Nodes"),
    h("div", { class: "scroll", "data-key": "nodes-scroll" }, h("table", { class: "nodes" },
      h("caption", { class: "sr-only" }, "Nodes of the cluster"),
      h("thead", {}, h("tr", {}, ["Node", "Address", "State", "Last heartbeat", "Silent for", "Partitions", "Eligible"].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, c.nodes.map((n) => h("tr", { "data-node": n.nodeId },
        h("th", { scope: "row" }, n.nodeId, n.nodeId === lock?.holder ? " (coordinator)" : ""),
        h("td", { class: "mono" }, n.advertiseAddr),
        h("td", {}, h("span", { class: `badge ${n.active ? "running" : "paused"}` }, n.active ? "active" : "inactive")),
        h("td", {}, time(n.lastHeartbeat)),
        h("td", { class: "num" }, span(durationMs(n.silent) ?? 0)),
        h("td", { class: "num" }, String(n.partitions)),
        h("td", { class: "eligible" }, h("span", { class: `badge ${n.eligible ? "running" : "paused"}`, title: n.eligibility }, n.eligible ? "yes" : "no"))))))),
    // Why an active node gets no partitions: the others cannot reach it
    // (docs/design/cluster.md, "Which nodes get partitions").
    c.eligibilityFallback
      ? h("p", { class: "why", id: "fallback" }, "No active node is verified by the others yet: partitions go to every active node.")
      : null,
    ...c.nodes.filter((n) => n.active && !n.eligible).map((n) =>
      h("p", { class: "why", "data-ineligible": n.nodeId }, h("strong", {}, n.nodeId), ` gets no partitions: ${n.eligibility}`)),
    h("h2", {}, "Partition map"),
    h("div", { class: "filters" }, h("label", { for: "pfilter" }, "Filter partitions"), filter),
    h("p", { class: "muted" }, parts.length > maxRows ? `${maxRows} of ${parts.length} partitions shown: narrow the filter.` : `${parts.length} partitions`),
    h("div", { class: "scroll", "data-key": "partitions-scroll" }, h("table", { class: "partitions" },
      h("caption", { class: "sr-only" }, "Partitions with their owners and epochs"),
      h("thead", {}, h("tr", {}, ["Queue", "Partition", "Id", "Owner", "Epoch"].map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, parts.slice(0, maxRows).map((p) => h("tr", {},
        h("td", {}, h("a", { href: queueHref(p.namespace, p.queue) }, `${p.namespace}/${p.queue}`)),
        h("td", { class: "num" }, String(p.index)),
        h("td", { class: "num" }, String(p.id)),
        h("td", {}, p.owner || h("span", { class: "muted" }, "unassigned")),
        h("td", { class: "num" }, String(p.epoch))))))),
  ];
}
