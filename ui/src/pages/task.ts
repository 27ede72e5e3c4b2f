// Task: what it is, its payload and result, the timeline of its
// executions on one time axis (timeline.ts) with the raw history below,
// and kill / retry.
import { DependencyFailure, DependencyState, TaskState, type Event, type HistoryEntry, type Task } from "@tenure/client";
import { api, calls, message } from "../api";
import { h, swap } from "../dom";
import { durationMs, exact, short, span } from "../format";
import { live } from "../live";
import { build, label, position, type Lane, type Mark, type Timeline } from "../timeline";
import { actions, attemptsText, badge, bytesView, confirm, progressView, say, time } from "../ui";
import { queueHref } from "./overview";
import { taskHref } from "./queue";
import { scheduleHref } from "./schedules";
import { workflowHref } from "./workflow";

/** render draws the task params.id into main. */
export async function render(main: HTMLElement, params: Record<string, string>): Promise<() => void> {
  const id = params.id;
  const top = h("div");
  const views = h("div", { class: "payloads" });
  const timeline = h("section", { "aria-labelledby": "timeline-title" });
  const history = h("div", { class: "scroll" });
  let drawnViews = false;

  const act = async (verb: string, run: (reason: string) => Promise<unknown>) => {
    const reason = await confirm(`${verb} task ${id}.`, verb);
    if (reason === null) {
      return;
    }
    try {
      await run(reason);
      say(`Task ${id}: ${verb.toLowerCase()} done.`);
    } catch (err) {
      say(message(err), "error");
    }
    await load();
  };

  const load = async () => {
    try {
      const [t, hist] = await Promise.all([api.tasks.getTask({ taskId: id }), api.tasks.getTaskHistory({ taskId: id })]);
      const task = t.task!;
      swap(top, details(task), actions("Task actions", [
        {
          label: "Retry", call: calls.retryTask,
          notHere: task.state === TaskState.FAILED || task.state === TaskState.DEAD ? undefined : "Retry applies to a failed or dead task",
          run: () => act("Retry", (reason) => api.tasks.retryTask({ taskId: id, reason })),
        },
        {
          label: "Kill", call: calls.killTask, danger: true,
          notHere: task.state === TaskState.WAITING || task.state === TaskState.LEASED || task.state === TaskState.COMMITTED || task.state === TaskState.BLOCKED ? undefined : "Kill applies to an unfinished task",
          run: () => act("Kill", (reason) => api.tasks.killTask({ taskId: id, reason })),
        },
      ]));
      if (!drawnViews || task.result.length > 0 && views.childElementCount < 2) {
        // The views keep the viewer's choice: drawn once, and again when a result appears.
        swap(views, bytesView("Payload", "payload", task.payload), task.result.length > 0 ? bytesView("Result", "result", task.result) : null);
        drawnViews = true;
      }
      const tl = build(hist.entries, Date.now());
      swap(timeline, h("h2", { id: "timeline-title" }, "Timeline of executions"), drawTimeline(tl));
      swap(history, rawHistory(hist.entries));
    } catch (err) {
      say(message(err), "error");
    }
  };

  // The task's events as the server decides them, newest last: what the
  // page redraws for.
  const events = h("ol", { class: "events live-events", id: "live-events", "aria-live": "polite" },
    h("li", { class: "muted" }, "None since the page opened."));
  const seen = (evs: Event[]) => {
    if (events.querySelector(".muted")) {
      events.replaceChildren();
    }
    for (const ev of evs) {
      events.append(h("li", { "data-type": ev.type, "data-lsn": String(ev.lsn) },
        h("time", {}, time(ev.at)), " ", h("strong", {}, ev.type), ev.requestedBy ? ` by ${ev.requestedBy}` : ""));
    }
    while (events.childElementCount > maxLiveEvents) {
      events.firstElementChild?.remove();
    }
  };
  const { control, stop } = live(load, { filter: { taskId: id }, events: seen });
  main.replaceChildren(
    h("div", { class: "head" }, h("h1", {}, "Task ", h("span", { class: "mono" }, id)), control),
    top, views, timeline, h("h2", {}, "Events as they happen"), events, h("h2", {}, "History"), history);
  return stop;
}

/** The events a task page lists at most (the oldest go first). */
const maxLiveEvents = 200;

function details(t: Task): HTMLElement {
  const row = (k: string, ...v: (Node | string)[]) => h("div", {}, h("dt", {}, k), h("dd", {}, ...v));
  const rp = t.retryPolicy;
  return h("dl", { class: "details" },
    row("State", badge(t.state)),
    row("Queue", h("a", { href: queueHref(t.namespace, t.queue) }, `${t.namespace}/${t.queue}`)),
    row("Kind", t.kind ? h("span", { class: "mono", id: "kind" }, t.kind) : "—"),
    row("Key", t.key ? h("span", { class: "mono", id: "key" }, t.key) : "—"),
    t.workflowId ? row("Workflow", h("a", { href: workflowHref(t.namespace, t.workflowId), id: "workflow" }, t.workflowId)) : null,
    t.spawnedBy ? row("Spawned by", taskLink(t.spawnedBy)) : null,
    t.dependencies.length ? row("Depends on", h("span", { id: "depends-on" }, t.dependencies.flatMap((d, i) => [i ? ", " : "", taskLink(d.taskId), ` ${(DependencyState[d.state] ?? "").toLowerCase()}`])),
      t.onDependencyFailure === DependencyFailure.RUN ? " (runs anyway if one fails)" : " (ends if one fails)") : null,
    row("Attempts", h("span", { id: "attempts" }, attemptsText(t))),
    row("Priority", String(t.priority)),
    row("Request id", t.requestId || "—", ...(fromSchedule(t) ?? [])),
    row("Execution window", fmtDur(durationMs(t.executionWindow))),
    row("Backoff", rp ? `${fmtDur(durationMs(rp.initialBackoff))} × ${rp.backoffMultiplier} up to ${fmtDur(durationMs(rp.maxBackoff))}` : "—"),
    row("Created", time(t.createdAt)),
    row("Updated", time(t.updatedAt)),
    row("Not before", time(t.notBefore)),
    t.deadline ? row("Deadline", h("span", { id: "deadline" }, time(t.deadline)), " (fails unless committed by then)") : null,
    row("Lease", t.leaseId ? h("span", { class: "mono" }, t.leaseId) : "—", t.workerId ? ` held by ${t.workerId} until ` : "", t.leaseId ? time(t.leaseExpiry) : ""),
    t.progress ? row("Progress", progressView(t.progress)) : null,
    t.traceContext ? row("Trace", h("span", { class: "mono", id: "traceparent", title: t.traceContext.tracestate }, t.traceContext.traceparent)) : null,
    t.failureReason ? row("Failure reason", t.failureReason) : null);
}

/**
 * fromSchedule links to the schedule whose tick submitted t, read from its
 * request id ("schedule QUEUE/NAME TICK", which no client's may be), or
 * is null.
 */
function fromSchedule(t: Task): (HTMLElement | string)[] | null {
  const m = /^schedule (.+)\/([^/ ]+) \d+$/.exec(t.requestId);
  return m ? [" · ", h("a", { href: scheduleHref(t.namespace, m[1], m[2]), id: "from-schedule" }, `schedule ${m[2]}`)] : null;
}

/** taskLink links to a task's page. */
function taskLink(id: string): HTMLElement {
  return h("a", { href: taskHref(id), class: "mono" }, id);
}

function fmtDur(d: number | undefined): string {
  return d === undefined ? "—" : span(d);
}

/** drawTimeline draws the lanes of tl on one axis, with every mark listed under its lane. */
function drawTimeline(tl: Timeline): HTMLElement {
  if (tl.lanes.length === 0 && tl.task.length <= 1) {
    return h("p", { class: "muted" }, "No attempt yet.");
  }
  const markEl = (m: Mark) => {
    const el = h("span", { class: `mark m-${m.type}`, title: `${m.label} at ${exact(m.at)}${m.detail ? ` — ${m.detail}` : ""}` });
    el.style.left = `${position(tl, m.at)}%`;
    return el;
  };
  const item = (m: Mark) => h("li", {}, h("time", { datetime: new Date(m.at).toISOString(), title: exact(m.at) }, short(m.at)),
    ` (+${span(m.at - tl.start)}) `, h("strong", {}, m.label), m.detail ? ` — ${m.detail}` : "");
  const laneEl = (lane: Lane, i: number) => {
    const bar = h("span", { class: `bar o-${lane.outcome}` });
    bar.style.left = `${position(tl, lane.from)}%`;
    bar.style.width = `${Math.max(position(tl, lane.to) - position(tl, lane.from), 0.4)}%`;
    return h("li", { class: "lane", "data-attempt": lane.attempt, "data-outcome": lane.outcome },
      h("div", { class: "lane-label" },
        h("strong", {}, `Attempt ${lane.attempt}`), ` · ${lane.outcome} · worker `, h("span", { class: "mono" }, lane.workerId || "—"),
        " · lease ", h("span", { class: "mono" }, lane.leaseId || "—"), ` · ${span(lane.to - lane.from)}`),
      h("div", { class: "track", "aria-hidden": "true" }, bar, lane.marks.map(markEl)),
      // Keyed by the lane's place: the lanes of a snoozed attempt share its number.
      h("details", { "data-key": `records-${i + 1}` }, h("summary", {}, `${lane.marks.length} records of attempt ${lane.attempt}`), h("ol", { class: "events" }, lane.marks.map(item))));
  };
  return h("div", { class: "timeline" },
    h("div", { class: "axis", "aria-hidden": "true" },
      h("span", {}, short(tl.start)), h("span", {}, `${span(tl.end - tl.start)} in all`), h("span", {}, short(tl.end))),
    h("div", { class: "lane task-lane" },
      h("div", { class: "lane-label" }, h("strong", {}, "Task"), " · ", tl.task.map((m) => m.label).join(", ") || "—"),
      h("div", { class: "track", "aria-hidden": "true" }, tl.task.map(markEl))),
    h("ol", { class: "lanes", "aria-label": "Attempts" }, tl.lanes.map(laneEl)),
    h("p", { class: "legend", "aria-hidden": "true" },
      ["LeaseGranted", "ExecutionStarted", "LeaseExtended", "TaskCancelled", "TaskCommitted", "LeaseExpired", "TaskFailed", "TaskSnoozed", "TaskCompleted"].map((t) =>
        h("span", {}, h("span", { class: `mark key m-${t}` }), " ", label(t)))));
}

function rawHistory(entries: HistoryEntry[]): HTMLElement {
  return h("table", { class: "history" },
    h("caption", { class: "sr-only" }, "Every log record of the task, oldest first"),
    h("thead", {}, h("tr", {}, ["LSN", "Record", "At", "Attempt", "Lease", "Worker", "By", "Reason", "Detail"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, entries.map((e) => h("tr", {},
      h("td", { class: "num" }, String(e.lsn)),
      h("td", {}, e.type),
      h("td", {}, time(e.at)),
      h("td", { class: "num" }, e.attempt ? String(e.attempt) : ""),
      h("td", { class: "mono" }, e.leaseId),
      h("td", { class: "mono" }, e.workerId),
      h("td", {}, e.requestedBy),
      h("td", {}, e.reason),
      h("td", {}, e.detail)))));
}
