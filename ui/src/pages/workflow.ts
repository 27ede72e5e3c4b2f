// Workflows: the list, and one workflow: its state, its tasks by state,
// its graph (graph.ts: each task below what it depends on, spawns dashed),
// the same tasks as a table, and cancel / retry. Refreshed live.
import { WorkflowState, type Task, type Workflow } from "@tenure/client";
import { api, calls, message, namespaces } from "../api";
import { h, svg, swap } from "../dom";
import { count } from "../format";
import { boxH, boxW, layout, type Box, type Layout } from "../graph";
import { live } from "../live";
import { taskHref } from "./queue";
import { actions, attemptsText, badge, confirm, say, stateName, time } from "../ui";

/** The most tasks the page reads of one workflow (pages of 1,000). */
const maxTasks = 5000;

/** The most boxes in one layer of the graph (the rest share one). */
const maxPerLayer = 6;

/** workflowHref is the address of a workflow's page. */
export function workflowHref(namespace: string, id: string): string {
  return `#/workflow/${encodeURIComponent(namespace)}/${encodeURIComponent(id)}`;
}

/** workflowStateName is a workflow's state as people read it: "running". */
function workflowStateName(s: WorkflowState): string {
  return (WorkflowState[s] ?? "unknown").toLowerCase();
}

function workflowBadge(s: WorkflowState): HTMLElement {
  const n = workflowStateName(s);
  return h("span", { class: `badge w-${n}` }, n);
}

/** countsText says a workflow's tasks by state: "2 completed, 1 blocked". */
function countsText(w: Workflow): string {
  const c = w.tasks;
  if (!c) {
    return "—";
  }
  const parts = ([["blocked", c.blocked], ["waiting", c.waiting], ["leased", c.leased], ["committed", c.committed],
    ["completed", c.completed], ["failed", c.failed], ["dead", c.dead]] as [string, bigint][])
    .filter(([, n]) => n > 0n).map(([name, n]) => `${count(n)} ${name}`);
  return parts.join(", ") || "none";
}

/** render draws the list of workflows into main. */
export async function render(main: HTMLElement): Promise<() => void> {
  const table = h("div", { class: "scroll" });
  const { control, stop } = live(async () => {
    try {
      const all: Workflow[] = [];
      for (const namespace of namespaces()) {
        let pageToken = "";
        do {
          const page = await api.workflows.listWorkflows({ namespace, pageToken, pageSize: 1000 });
          all.push(...page.workflows);
          pageToken = page.nextPageToken;
        } while (pageToken && all.length < maxTasks);
      }
      swap(table, all.length === 0
        ? h("p", { class: "muted" }, "No workflows. A workflow is a SubmitBatch with a workflow_id (docs/guides/workflows.md).")
        : h("table", { class: "workflows" },
          h("caption", { class: "sr-only" }, "Workflows"),
          h("thead", {}, h("tr", {}, ["Workflow", "State", "Tasks", "By state", "Created", "Updated"].map((c) =>
            h("th", { scope: "col", class: c === "Tasks" ? "num" : "" }, c)))),
          h("tbody", {}, all.map((w) => h("tr", { "data-workflow": w.workflowId },
            h("th", { scope: "row" }, h("span", { class: "ns" }, `${w.namespace}/`), h("a", { href: workflowHref(w.namespace, w.workflowId) }, w.workflowId)),
            h("td", {}, workflowBadge(w.state)),
            h("td", { class: "num" }, count(w.total)),
            h("td", {}, countsText(w)),
            h("td", {}, time(w.createdAt)),
            h("td", {}, time(w.updatedAt)))))));
    } catch (err) {
      say(message(err), "error");
    }
  });
  main.replaceChildren(h("div", { class: "head" }, h("h1", {}, "Workflows"), control), table);
  return stop;
}

/** renderOne draws workflow params.namespace/params.id into main. */
export async function renderOne(main: HTMLElement, params: Record<string, string>): Promise<() => void> {
  const { namespace, id } = params;
  const top = h("div");
  const graph = h("section", { "aria-labelledby": "graph-title" });
  const list = h("div", { class: "scroll", "data-key": "workflow-tasks" });

  // act asks for a reason, runs the action, and says what it did.
  const act = async (verb: string, run: (reason: string) => Promise<string>) => {
    const reason = await confirm(`${verb} workflow ${id}.`, verb);
    if (reason === null) {
      return;
    }
    try {
      say(`Workflow ${id}: ${await run(reason)}.`);
    } catch (err) {
      say(message(err), "error");
    }
    await load();
  };

  const load = async () => {
    try {
      const tasks: Task[] = [];
      let wf: Workflow | undefined;
      let pageToken = "";
      do {
        const page = await api.workflows.getWorkflow({ namespace, workflowId: id, pageToken, pageSize: 1000 });
        wf ??= page.workflow;
        tasks.push(...page.tasks);
        pageToken = page.nextPageToken;
      } while (pageToken && tasks.length < maxTasks);
      const w = wf!;
      const running = w.state === WorkflowState.RUNNING;
      swap(top, details(w, tasks.length, pageToken !== ""), actions("Workflow actions", [
        {
          label: "Retry", call: calls.retryWorkflow,
          notHere: w.state === WorkflowState.FAILED || w.state === WorkflowState.CANCELLED ? undefined : "Retry applies to a failed or cancelled workflow",
          run: () => act("Retry", async (reason) =>
            `${count((await api.workflows.retryWorkflow({ namespace, workflowId: id, reason })).retried)} tasks retried`),
        },
        {
          label: "Cancel", call: calls.cancelWorkflow, danger: true,
          notHere: running ? undefined : "Cancel applies to a running workflow",
          run: () => act("Cancel", async (reason) =>
            `${count((await api.workflows.cancelWorkflow({ namespace, workflowId: id, reason })).cancelled)} tasks cancelled`),
        },
      ]));
      swap(graph, h("h2", { id: "graph-title" }, "Graph"), drawGraph(tasks, id));
      swap(list, taskTable(tasks));
    } catch (err) {
      say(message(err), "error");
    }
  };

  const { control, stop } = live(load);
  main.replaceChildren(
    h("div", { class: "head" }, h("h1", {}, "Workflow ", h("span", { class: "mono" }, id)), control),
    top, graph, h("h2", {}, "Tasks"), list);
  return stop;
}

function details(w: Workflow, read: number, more: boolean): HTMLElement {
  const row = (k: string, ...v: (Node | string)[]) => h("div", {}, h("dt", {}, k), h("dd", {}, ...v));
  const c = w.cancelled;
  return h("dl", { class: "details" },
    row("State", h("span", { id: "workflow-state" }, workflowBadge(w.state))),
    row("Namespace", w.namespace),
    row("Tasks", h("span", { id: "workflow-tasks" }, `${count(w.total)}: ${countsText(w)}`),
      more ? h("span", { class: "muted" }, ` (the page shows the first ${count(read)})`) : ""),
    row("Created", time(w.createdAt)),
    row("Updated", time(w.updatedAt)),
    c ? row("Cancelled", time(c.pausedAt), c.requestedBy ? ` by ${c.requestedBy}` : "", c.reason ? `: ${c.reason}` : "") : null);
}

/**
 * drawGraph draws the tasks' graph as SVG: a box per task (a link to its
 * page) colored by state, an arrow from each dependency, a dashed one from
 * the task that spawned it.
 */
function drawGraph(tasks: Task[], id: string): HTMLElement {
  const byId = new Map(tasks.map((t) => [t.taskId, t]));
  const g: Layout = layout(tasks.map((t) => ({ id: t.taskId, deps: t.dependencies.map((d) => d.taskId), parent: t.spawnedBy })), maxPerLayer);
  const at = new Map(g.boxes.map((b) => [b.id, b]));
  const edge = (from: Box, to: Box, spawn: boolean) => {
    const x1 = from.x + boxW / 2, y1 = from.y + boxH, x2 = to.x + boxW / 2, y2 = to.y;
    const my = (y1 + y2) / 2;
    return svg("path", { class: spawn ? "edge spawn" : "edge", d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2 - 4}`, "marker-end": "url(#arrow)" });
  };
  const box = (b: Box) => {
    if (b.tasks.length > 1) {
      const states = new Map<string, number>();
      for (const tid of b.tasks) {
        const s = stateName(byId.get(tid)!.state);
        states.set(s, (states.get(s) ?? 0) + 1);
      }
      const by = [...states].map(([s, n]) => `${n} ${s}`).join(", ");
      return svg("g", { class: "node more", "data-tasks": b.tasks.length, transform: `translate(${b.x},${b.y})` },
        svg("title", {}, `${b.tasks.length} more tasks of this layer: ${by}`),
        svg("rect", { width: boxW, height: boxH, rx: 6 }),
        svg("text", { x: 10, y: 19 }, `+${count(b.tasks.length)} more`),
        svg("text", { x: 10, y: 36, class: "sub" }, by.length > 22 ? by.slice(0, 21) + "…" : by));
    }
    const t = byId.get(b.id)!;
    const s = stateName(t.state);
    const label = `Task ${t.taskId}, queue ${t.queue}, ${s}`;
    return svg("a", { href: taskHref(t.taskId), "aria-label": label, "data-task": t.taskId, "data-state": s },
      svg("g", { class: `node s-${s}`, transform: `translate(${b.x},${b.y})` },
        svg("title", {}, `${label}; ${attemptsText(t)}`),
        svg("rect", { width: boxW, height: boxH, rx: 6 }),
        svg("text", { x: 10, y: 19 }, `${t.queue.length > 10 ? t.queue.slice(0, 9) + "…" : t.queue} · ${t.taskId.slice(-6)}`),
        svg("text", { x: 10, y: 36, class: "sub" }, s)));
  };
  const drawing = svg("svg", {
    class: "graph", role: "group", "aria-label": `Graph of workflow ${id}: ${tasks.length} tasks, each below the tasks it depends on`,
    width: g.width, height: g.height, viewBox: `0 0 ${g.width} ${g.height}`,
  },
  svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    svg("path", { d: "M0,0 L8,4 L0,8 z" }))),
  g.edges.map((e) => edge(at.get(e.from)!, at.get(e.to)!, e.spawn)),
  g.boxes.map(box));
  return h("div", { class: "scroll graph-box", "data-key": "graph" }, drawing,
    h("p", { class: "legend" }, "Arrows run from a task to the tasks that depend on it; dashed ones from a task to those its commit spawned."));
}

/** taskTable lists the tasks, numbered as the CLI's workflow get does. */
function taskTable(tasks: Task[]): HTMLElement {
  const num = new Map(tasks.map((t, i) => [t.taskId, i + 1]));
  const ref = (tid: string) => h("a", { href: taskHref(tid), class: "mono" }, num.has(tid) ? `#${num.get(tid)}` : tid);
  const refs = (ids: string[]) => ids.length ? ids.flatMap((tid, i) => (i ? [" ", ref(tid)] : [ref(tid)])) : ["—"];
  return h("table", { class: "workflow-tasks" },
    h("caption", { class: "sr-only" }, "The workflow's tasks, in creation order"),
    h("thead", {}, h("tr", {}, ["#", "Task", "Queue", "State", "Attempts", "Depends on", "Spawned by", "Updated"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, tasks.map((t, i) => h("tr", { "data-task": t.taskId },
      h("td", { class: "num" }, `#${i + 1}`),
      h("td", {}, h("a", { href: taskHref(t.taskId), class: "mono" }, t.taskId)),
      h("td", {}, t.queue),
      h("td", {}, badge(t.state)),
      h("td", {}, attemptsText(t)),
      h("td", {}, ...refs(t.dependencies.map((d) => d.taskId))),
      h("td", {}, ...(t.spawnedBy ? [ref(t.spawnedBy)] : ["—"])),
      h("td", {}, time(t.updatedAt))))));
}
