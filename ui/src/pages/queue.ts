// Queue: its counts, pause, limits and schedules, its tasks by state one
// page at a time (never the whole queue: it may hold 100,000 tasks) with a
// filter, the bulk actions with a confirmation, and a form to set its
// limits.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { TaskState, type Queue, type Schedule, type SetQueueLimitsRequestSchema, type Task } from "@tenure/client";
import { api, calls, message } from "../api";
import { h, swap } from "../dom";
import { count, durationMs, span } from "../format";
import { live } from "../live";
import { actions, attemptsText, badge, confirm, guard, outcome, progressText, say, showOutcome, stateName, time, type Action } from "../ui";
import { limitsText, queueHref, sparkline } from "./overview";
import { scheduleHref, schedulesHref } from "./schedules";

/** Tasks on one page. */
export const pageSize = 50;

const states = [TaskState.BLOCKED, TaskState.WAITING, TaskState.LEASED, TaskState.COMMITTED, TaskState.COMPLETED, TaskState.FAILED, TaskState.DEAD];

/** taskHref is the address of a task's page. */
export function taskHref(id: string): string {
  return `#/task/${encodeURIComponent(id)}`;
}

/**
 * workerOf is the worker of a task's current lease, or of its last
 * attempt once it has none (a finished or retried task).
 */
export function workerOf(t: Task): string {
  return t.workerId || t.executions.at(-1)?.workerId || "";
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
  let scheds: Schedule[] | string = [];

  const select = h("select", { id: "state", name: "state" },
    h("option", { value: "" }, "any state"),
    states.map((s) => h("option", { value: stateName(s), selected: s === state }, stateName(s))));
  const text = h("input", { id: "filter", name: "q", type: "search", value: filterText, placeholder: "id, kind, request id, worker, reason", autocomplete: "off" });
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
      h("p", { id: "limits" }, "Limits: ", h("span", { "data-limits": "" }, limitsText(q.limits)),
        q.limits && limitsText(q.limits) !== "none" ? [" · set by ", q.limits.requestedBy || "—", q.limits.reason ? ` (${q.limits.reason})` : "", " at ", time(q.limits.setAt)] : "",
        q.limitedPartitions > 0 && q.limitedPartitions < q.partitions ? ` · only ${q.limitedPartitions} of ${q.partitions} partitions have them: set them again` : ""),
      keysPart(q),
      h("p", { id: "queue-schedules" }, "Schedules: ", typeof scheds === "string"
        ? h("span", { class: "muted" }, `not shown: ${scheds}`)
        : scheds.length === 0
          ? h("span", { class: "muted" }, "none")
          : [scheds.map((s, i) => [i ? ", " : "", h("a", { href: scheduleHref(s.namespace, s.queue, s.name), "data-key": `s-${s.name}` }, s.name), s.paused ? " (paused)" : ""]),
            " · ", h("a", { href: schedulesHref(ns, name), "data-key": "schedules" }, "their next fires")]),
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
      ? tasks.filter((t) => [t.taskId, t.kind, t.requestId, t.workerId, t.failureReason].some((s) => s.toLowerCase().includes(needle)))
      : tasks;
    const pager = h("nav", { class: "pager", "aria-label": "Pages of tasks" },
      pageToken ? h("a", { href: href({ state: params.state ?? "", q: filterText }), "data-key": "first" }, "First page") : null,
      next ? h("a", { href: href({ state: params.state ?? "", q: filterText, page: next }), "data-key": "next", rel: "next" }, "Next page") : null,
      h("span", { class: "muted" }, `${shown.length} of ${tasks.length} tasks on this page${needle ? ` match “${filterText}”` : ""}`));
    swap(list,
      shown.length === 0
        ? h("p", { class: "muted", id: "no-tasks" }, tasks.length === 0 ? "No tasks on this page." : "No task on this page matches the filter.")
        : h("div", { class: "scroll", "data-key": "tasks-scroll" }, h("table", { class: "tasks" },
          h("caption", { class: "sr-only" }, "Tasks of the queue"),
          h("thead", {}, h("tr", {},
            ["Task", "Kind", "State", "Attempts", "Priority", "Created", "Updated", "Worker", "Progress", "Failure reason"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, shown.map((t) => h("tr", { "data-task": t.taskId },
            h("td", {}, h("a", { href: taskHref(t.taskId), class: "mono", "data-key": `t-${t.taskId}` }, t.taskId)),
            h("td", { class: "mono" }, t.kind || "—"),
            h("td", {}, badge(t.state)),
            h("td", { class: "num", title: attemptsText(t), "data-attempts": "" }, `${t.attemptsUsed}/${t.retryPolicy?.maxAttempts ?? "—"}`),
            h("td", { class: "num" }, String(t.priority)),
            h("td", {}, time(t.createdAt)),
            h("td", {}, time(t.updatedAt)),
            h("td", { class: "mono", "data-worker": "" }, workerOf(t) || "—"),
            h("td", { "data-progress": "" }, progressText(t.progress)),
            h("td", { class: "reason" }, t.failureReason || "")))))),
      pager);
  };

  const limits = limitsForm(ns, name, async (q) => {
    queue = q;
    drawHead();
  });
  const load = async () => {
    try {
      const [q, page, sc] = await Promise.all([
        api.queues.getQueue({ namespace: ns, queue: name }),
        api.tasks.listTasks({ namespace: ns, queue: name, state, pageSize, pageToken }),
        // A token that may not list schedules still sees the queue.
        api.schedules.listSchedules({ namespace: ns, queue: name }).then((r) => r.schedules, (err: unknown) => message(err)),
      ]);
      queue = q.queue;
      scheds = sc;
      limits.fill(queue);
      drawHead();
      drawList(page.tasks, page.nextPageToken);
    } catch (err) {
      say(message(err), "error");
    }
  };

  const { control, stop } = live(load, { filter: { namespace: ns, queue: name } });
  main.replaceChildren(
    h("div", { class: "head" }, h("h1", {}, "Queue ", h("span", { class: "ns" }, ns + "/"), name), control),
    head, limits.el, h("h2", {}, "Tasks"), form, list);
  return stop;
}

/** A number typed into a form: "" is none; NaN is not a number. */
function typed(input: HTMLInputElement): number | undefined {
  return input.value.trim() === "" ? undefined : Number(input.value);
}

/**
 * keysPart shows the queue's keys: how many have unfinished tasks, how many
 * a key limit holds back, and the keys with the most waiting tasks; nothing
 * for a queue without keys.
 */
function keysPart(q: Queue): HTMLElement | string {
  const k = q.keys;
  if (!k) {
    return "";
  }
  const held = ([["concurrency", k.heldByConcurrency], ["rate", k.heldByRate], ["order", k.heldByOrder]] as const)
    .filter(([, n]) => n > 0n).map(([why, n]) => `${count(n)} by ${why}`);
  return h("section", { id: "keys", "aria-label": "Keys" },
    h("p", {}, "Keys: ", h("span", { "data-keys": "" }, `${count(k.keys)} with unfinished tasks`),
      held.length ? ` · held back: ${held.join(", ")}` : ""),
    k.top.length === 0 ? "" : h("div", { class: "scroll" }, h("table", { class: "keys" },
      h("caption", { class: "sr-only" }, "The keys with the most waiting tasks"),
      h("thead", {}, h("tr", {}, ["Key", "Waiting", "Leased", "Held by"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, k.top.map((t) => h("tr", { "data-key-name": t.key },
        h("td", { class: "mono" }, t.key),
        h("td", { class: "num" }, count(t.waiting)),
        h("td", { class: "num" }, count(t.leased)),
        h("td", { "data-held": t.held }, t.held || "—")))))));
}

/**
 * limitsForm sets or clears the queue's limits (SetQueueLimits). It is
 * filled with the queue's limits once they are known (fill), and again
 * after each change; an emptied field clears its limit; a burst left empty
 * is kept, or with a new rate the leases of one second. done gets the
 * queue the server answered.
 */
function limitsForm(ns: string, name: string, done: (q: Queue) => Promise<void>): { el: HTMLElement; fill: (q: Queue | undefined) => void } {
  const num = (id: string, field: string, step: string) => h("input", { id, name: field, type: "number", step, min: 0, inputmode: step === "1" ? "numeric" : "decimal", autocomplete: "off" });
  const inputs = {
    max_concurrency: num("limit-concurrency", "max_concurrency", "1"),
    rate: num("limit-rate", "rate", "any"),
    burst: num("limit-burst", "burst", "1"),
  };
  const submit = h("button", { type: "submit" }, "Set limits");
  const out = outcome("limits-outcome");
  const why = guard(calls.setQueueLimits, [...Object.values(inputs), submit]);
  let current: Queue | undefined;
  let filled = false;
  const fill = (q: Queue | undefined) => {
    current = q;
    if (filled || !q) {
      return;
    }
    filled = true;
    const l = q.limits;
    inputs.max_concurrency.value = l?.maxConcurrency ? String(l.maxConcurrency) : "";
    inputs.rate.value = l?.rate ? String(l.rate) : "";
    inputs.burst.value = l?.burst ? String(l.burst) : "";
  };
  const form = h("form", {
    class: "filters limits", "aria-labelledby": "limits-title",
    onsubmit: async (ev: Event) => {
      ev.preventDefault();
      const had = current?.limits;
      const mc = typed(inputs.max_concurrency);
      const rate = typed(inputs.rate);
      const clearRate = rate === undefined && !!had?.rate;
      const req: MessageInitShape<typeof SetQueueLimitsRequestSchema> = {
        namespace: ns, queue: name, reason: "from the dashboard",
        maxConcurrency: mc, clearMaxConcurrency: mc === undefined && !!had?.maxConcurrency,
        // The burst goes with the rate: clearing the rate clears it.
        rate, clearRate, burst: clearRate ? undefined : typed(inputs.burst),
      };
      try {
        const r = await api.queues.setQueueLimits(req);
        filled = false;
        fill(r.queue);
        showOutcome(out, inputs, { text: r.changed ? `Limits set: ${limitsText(r.queue?.limits)}.` : `Unchanged: the queue had these limits (${limitsText(r.queue?.limits)}).` });
        if (r.queue) {
          await done(r.queue);
        }
      } catch (err) {
        showOutcome(out, inputs, { err });
      }
    },
  },
  h("label", { for: "limit-concurrency" }, "Max concurrency"), inputs.max_concurrency,
  h("label", { for: "limit-rate" }, "Rate (per second)"), inputs.rate,
  h("label", { for: "limit-burst" }, "Burst"), inputs.burst,
  submit);
  return {
    el: h("section", { "aria-labelledby": "limits-title" },
      h("h2", { id: "limits-title" }, "Limits"),
      h("p", { class: "muted" }, "Leases of the whole queue: at most max concurrency at once, and rate per second with bursts of burst. Empty a field to clear its limit (the burst goes with the rate); a burst left empty is kept, or with a first rate is the leases of one second."),
      form, why, out),
    fill,
  };
}
