// Queue: its counts and pause, its tasks by state one page at a time
// (never the whole queue: it may hold 100,000 tasks) with a filter, and
// the bulk actions with a confirmation.
import { TaskState, type Queue, type Task } from "@tenure/client";
import { api, calls, message } from "../api";
import { h, swap } from "../dom";
import { count, durationMs, span } from "../format";
import { live } from "../live";
import { actions, badge, confirm, say, stateName, time, type Action } from "../ui";
import { queueHref, sparkline } from "./overview";

/** Tasks on one page. */
export const pageSize = 50;

const states = [TaskState.WAITING, TaskState.LEASED, TaskState.COMMITTED, TaskState.COMPLETED, TaskState.FAILED, TaskState.DEAD];

/** taskHref is the address of a task's page. */
export function taskHref(id: string): string {
  return `#/task/${encodeURIComponent(id)}`;
}

/**
 * render draws the queue namespace/queue into main. params.state filters
 * by state (a state's name), params.q filters the page's rows by text,
 * params.page is a page token.
 */
export async function render(main: HTMLElement, params: Record<string, string>): Promise<() => void> {
  const ns = params.namespace;
  const name = params.queue;
  const state = states.find((s) => stateName(s) === params.state) ?? TaskState.UNSPECIFIED;
  const filterText = params.q ?? "";
  const pageToken = params.page ?? "";
  const href = (p: Record<string, string>) => {
    const q = new URLSearchParams(Object.entries(p).filter(([, v]) => v !== ""));
    const s = q.toString();
    return queueHref(ns, name) + (s ? "?" + s : "");
  };

  const head = h("section", { class: "queue-head", "aria-label": "Queue" });
  const list = h("section", { "aria-label": "Tasks" });
  let queue: Queue | undefined;

  const select = h("select", { id: "state", name: "state" },
    h("option", { value: "" }, "any state"),
    states.map((s) => h("option", { value: stateName(s), selected: s === state }, stateName(s))));
  const text = h("input", { id: "filter", name: "q", type: "search", value: filterText, placeholder: "id, request id, worker, reason", autocomplete: "off" });
  const form = h("form", {
    class: "filters", role: "search", "aria-label": "Filter tasks",
    onsubmit: (ev: Event) => {
      ev.preventDefault();
      location.hash = href({ state: select.value, q: text.value });
    },
  },
  h("label", { for: "state" }, "State"), select,
  h("label", { for: "filter" }, "Filter this page"), text,
  h("button", { type: "submit" }, "Apply"));
  select.addEventListener("change", () => form.requestSubmit());

  const bulk = async (verb: string, what: string, run: (reason: string) => Promise<{ changed: bigint; skipped: bigint }>) => {
    const reason = await confirm(`${verb} ${what} of queue ${ns}/${name}${state ? ` in state ${stateName(state)}` : ""}. This acts on every such task now, not only this page.`, verb);
    if (reason === null) {
      return;
    }
    try {
      const r = await run(reason);
      say(`${verb}: ${count(r.changed)} changed, ${count(r.skipped)} skipped.`);
    } catch (err) {
      say(message(err), "error");
    }
    await load();
  };
  const filter = () => ({ namespace: ns, queue: name, state });
  const applies = (verb: string, ok: TaskState[]) =>
    state === TaskState.UNSPECIFIED || ok.includes(state) ? undefined : `${verb} applies to ${ok.map(stateName).join(", ")} tasks: pick one of those states or any state`;

  const drawHead = () => {
    if (!queue) {
      return;
    }
    const q = queue;
    const pauseAction: Action = q.paused
      ? {
        label: "Resume", call: calls.resumeQueue, run: async () => {
          try {
            await api.queues.resumeQueue({ namespace: ns, queue: name, reason: "from the dashboard" });
            say(`Queue ${ns}/${name} resumed.`);
          } catch (err) {
            say(message(err), "error");
          }
          await load();
        },
      }
      : {
        label: "Pause", call: calls.pauseQueue, run: async () => {
          try {
            await api.queues.pauseQueue({ namespace: ns, queue: name, reason: "from the dashboard" });
            say(`Queue ${ns}/${name} paused: workers lease nothing more from it.`);
          } catch (err) {
            say(message(err), "error");
          }
          await load();
        },
      };
    const age = durationMs(q.oldestWaitingAge);
    swap(head,
      h("dl", { class: "counts" }, states.map((s) => h("div", {},
        h("dt", {}, h("a", { href: href({ state: stateName(s) }), "data-key": `count-${stateName(s)}` }, stateName(s))),
        h("dd", { "data-count": stateName(s) }, count(q.tasks?.[stateName(s) as "waiting"]))))),
      h("p", {},
        q.paused ? h("span", { class: "badge paused", id: "paused" }, "paused") : h("span", { class: "badge running", id: "paused" }, "running"),
        q.paused && q.pause ? [" by ", q.pause.requestedBy || "—", q.pause.reason ? ` (${q.pause.reason})` : "", " at ", time(q.pause.pausedAt)] : "",
        ` · ${count(q.activeLeases)} active leases · oldest waiting ${age === undefined ? "—" : span(age)} · ${q.partitions} partition${q.partitions === 1 ? "" : "s"} · `,
        sparkline(q.perMinute, q.lastHour)),
      actions("Queue actions", [
        pauseAction,
        {
          label: "Retry…", call: calls.retryTasks, notHere: applies("Retry", [TaskState.FAILED, TaskState.DEAD]),
          run: () => bulk("Retry", "every failed or dead task", (reason) => api.tasks.retryTasks({ filter: filter(), reason })),
        },
        {
          label: "Kill…", call: calls.killTasks, danger: true, notHere: applies("Kill", [TaskState.WAITING, TaskState.LEASED, TaskState.COMMITTED]),
          run: () => bulk("Kill", "every unfinished task", (reason) => api.tasks.killTasks({ filter: filter(), reason })),
        },
        {
          label: "Purge…", call: calls.purgeTasks, danger: true, notHere: applies("Purge", [TaskState.COMPLETED, TaskState.FAILED, TaskState.DEAD]),
          run: () => bulk("Purge", "every finished task (deleted for good)", (reason) => api.tasks.purgeTasks({ filter: filter(), reason })),
        },
      ]));
  };

  const drawList = (tasks: Task[], next: string) => {
    const needle = filterText.toLowerCase();
    const shown = needle
      ? tasks.filter((t) => [t.taskId, t.requestId, t.workerId, t.failureReason].some((s) => s.toLowerCase().includes(needle)))
      : tasks;
    const pager = h("nav", { class: "pager", "aria-label": "Pages of tasks" },
      pageToken ? h("a", { href: href({ state: params.state ?? "", q: filterText }), "data-key": "first" }, "First page") : null,
      next ? h("a", { href: href({ state: params.state ?? "", q: filterText, page: next }), "data-key": "next", rel: "next" }, "Next page") : null,
      h("span", { class: "muted" }, `${shown.length} of ${tasks.length} tasks on this page${needle ? ` match “${filterText}”` : ""}`));
    swap(list,
      shown.length === 0
        ? h("p", { class: "muted", id: "no-tasks" }, tasks.length === 0 ? "No tasks on this page." : "No task on this page matches the filter.")
        : h("div", { class: "scroll" }, h("table", { class: "tasks" },
          h("caption", { class: "sr-only" }, "Tasks of the queue"),
          h("thead", {}, h("tr", {},
            ["Task", "State", "Attempt", "Priority", "Created", "Updated", "Worker", "Failure reason"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, shown.map((t) => h("tr", { "data-task": t.taskId },
            h("td", {}, h("a", { href: taskHref(t.taskId), class: "mono", "data-key": `t-${t.taskId}` }, t.taskId)),
            h("td", {}, badge(t.state)),
            h("td", { class: "num" }, String(t.attempt)),
            h("td", { class: "num" }, String(t.priority)),
            h("td", {}, time(t.createdAt)),
            h("td", {}, time(t.updatedAt)),
            h("td", { class: "mono" }, t.workerId || "—"),
            h("td", { class: "reason" }, t.failureReason || "")))))),
      pager);
  };

  const load = async () => {
    try {
      const [q, page] = await Promise.all([
        api.queues.getQueue({ namespace: ns, queue: name }),
        api.tasks.listTasks({ namespace: ns, queue: name, state, pageSize, pageToken }),
      ]);
      queue = q.queue;
      drawHead();
      drawList(page.tasks, page.nextPageToken);
    } catch (err) {
      say(message(err), "error");
    }
  };

  const { control, stop } = live(load);
  main.replaceChildren(
    h("div", { class: "head" }, h("h1", {}, "Queue ", h("span", { class: "ns" }, ns + "/"), name), control),
    head, h("h2", {}, "Tasks"), form, list);
  return stop;
}
