// Schedules: every schedule with its next fire and last decision, and one
// schedule's page: its definition, its next fires, its recent decisions
// with the tasks they submitted, pause / resume, and a backfill of past
// ticks with a confirmation.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { FireOutcome, OverlapPolicy, TaskState, type Schedule, type ScheduleFire } from "@tenure/client";
import { api, calls, message, namespaces } from "../api";
import { h, swap } from "../dom";
import { count, durationMs, span } from "../format";
import { live } from "../live";
import { actions, badge, bytesView, confirm, guard, outcome, say, showOutcome, table, time } from "../ui";
import { queueHref } from "./overview";
import { taskHref } from "./queue";

/** scheduleHref is the address of a schedule's page. */
export function scheduleHref(namespace: string, queue: string, name: string): string {
  return `#/schedule/${[namespace, queue, name].map(encodeURIComponent).join("/")}`;
}

/** schedulesHref is the address of the list of the schedules of a queue (or of all). */
export function schedulesHref(namespace = "", queue = ""): string {
  const q = new URLSearchParams(Object.entries({ namespace, queue }).filter(([, v]) => v !== "")).toString();
  return "#/schedules" + (q ? "?" + q : "");
}

/** outcomeName is a tick's outcome as people read it: "fired". */
export function outcomeName(o: FireOutcome): string {
  return (FireOutcome[o] ?? "unknown").toLowerCase();
}

/** overlapName is an overlap policy as people read it (unset is skip). */
export function overlapName(p: OverlapPolicy): string {
  return (OverlapPolicy[p === OverlapPolicy.UNSPECIFIED ? OverlapPolicy.SKIP : p] ?? "unknown").toLowerCase().replace("_", " ");
}

/** when is a schedule's expression with its zone: "@every 1s (UTC)". */
function when(s: Schedule): string {
  return `${s.cron} (${s.timeZone || "UTC"})`;
}

/** runState is a schedule's paused or running label. */
function runState(s: Schedule): HTMLElement {
  return s.paused ? h("span", { class: "badge paused", "data-state": "paused" }, "paused") : h("span", { class: "badge running", "data-state": "running" }, "running");
}

/** tick is the tick of a decision, or the range of ticks it skipped. */
function tick(f: ScheduleFire): (HTMLElement | string)[] {
  if (f.outcome === FireOutcome.SKIPPED && f.until) {
    return [time(f.tick), " to ", time(f.until), h("span", { class: "muted" }, " (excluded)")];
  }
  return [time(f.tick)];
}

/**
 * waiting says why a schedule's due ticks are not decided (they wait for
 * the task of its last fire, as its overlap policy says) and what becomes
 * of them, or is null.
 */
function waiting(s: Schedule): HTMLElement | null {
  if (!s.waitingForTask) {
    return null;
  }
  const state = s.recent.find((f) => f.taskId === s.waitingForTask)?.taskState;
  return h("p", { id: "schedule-waiting", class: "why" },
    "Its ticks wait since ", time(s.waitingSince, s.timeZone || "UTC"), ` (overlap ${overlapName(s.overlap)}) for task `,
    h("a", { href: taskHref(s.waitingForTask), class: "mono", "data-key": "waiting-task" }, s.waitingForTask),
    state ? [" (", badge(state), ")"] : "",
    " of its last fire: ",
    s.heldTick ? "the held tick fires when it finishes, and the ticks due after it until then are skipped." : "the ticks due until it finishes are skipped then.");
}

/** taskLink links to the task a decision submitted, or is "—". */
function taskLink(f: ScheduleFire): HTMLElement | string {
  return f.taskId ? h("a", { href: taskHref(f.taskId), class: "mono", "data-key": `t-${f.taskId}` }, f.taskId) : "—";
}

/** The records that change a schedule: its pages follow them. */
const scheduleRecords = ["ScheduleCreated", "ScheduleUpdated", "SchedulePaused", "ScheduleResumed", "ScheduleDeleted", "ScheduleFired",
  "ScheduleSkipped", "ScheduleHeld", "TaskCompleted", "TaskFailed", "TaskDead"];

/**
 * render draws the list of schedules into main: of params.namespace and
 * params.queue if given (the Queue page links here), else every one the
 * token may see.
 */
export async function render(main: HTMLElement, params: Record<string, string>): Promise<() => void> {
  const ns = params.namespace ?? "";
  const queue = params.queue ?? "";
  const body = h("div", { class: "scroll" });
  const { control, stop } = live(async () => {
    try {
      const list: Schedule[] = [];
      for (const n of ns ? [ns] : namespaces()) {
        list.push(...(await api.schedules.listSchedules({ namespace: n, queue })).schedules);
      }
      swap(body, scheduleTable(list));
    } catch (err) {
      say(message(err), "error");
    }
  }, { filter: { namespace: ns, queue, types: scheduleRecords } });
  const scope = queue ? [" of queue ", h("a", { href: queueHref(ns || "default", queue) }, `${ns || "default"}/${queue}`)] : ns ? ` of namespace ${ns}` : "";
  main.replaceChildren(
    h("div", { class: "head" }, h("h1", {}, "Schedules"), control),
    h("p", { class: "muted" }, "Schedules", scope, ": each submits a task to its queue at the ticks of its cron expression.",
      queue || ns ? [" ", h("a", { href: schedulesHref() }, "Every schedule")] : ""),
    body);
  return stop;
}

function scheduleTable(list: Schedule[]): HTMLElement {
  if (list.length === 0) {
    return h("p", { class: "muted", id: "no-schedules" }, "No schedules: create one with tenure schedule create (docs/guides/schedules.md).");
  }
  return table("schedules", "Schedules with their next fire and last decision",
    ["Schedule", "When", "Overlap", "Next fire", "Last decision", "State"],
    list.map((s) => {
      const last = s.recent[s.recent.length - 1];
      const id = `${s.namespace}/${s.queue}/${s.name}`;
      return h("tr", { "data-schedule": id },
        h("th", { scope: "row" }, h("a", { href: scheduleHref(s.namespace, s.queue, s.name), "data-key": `s-${id}` },
          h("span", { class: "ns" }, `${s.namespace}/${s.queue}/`), s.name)),
        h("td", { class: "mono" }, when(s)),
        h("td", {}, overlapName(s.overlap)),
        h("td", { "data-next": "" }, s.waitingForTask
          ? h("span", { class: "muted", "data-waiting": s.waitingForTask }, "waiting for its last task")
          : s.nextFires.length ? time(s.nextFires[0]) : h("span", { class: "muted" }, s.paused ? "paused" : "none")),
        h("td", { "data-last": last ? outcomeName(last.outcome) : "" }, last
          ? [h("span", { class: `badge o-${outcomeName(last.outcome)}` }, outcomeName(last.outcome)), " ", tick(last), last.reason ? ` (${last.reason})` : ""]
          : h("span", { class: "muted" }, "none yet")),
        h("td", {}, runState(s)));
    }));
}

/** renderOne draws the schedule params.namespace/params.queue/params.name into main. */
export async function renderOne(main: HTMLElement, params: Record<string, string>): Promise<() => void> {
  const { namespace: ns, queue, name } = params;
  const ref = { namespace: ns, queue, name };
  const top = h("div");
  const defn = h("section", { "aria-labelledby": "definition-title" });
  const payload = h("div", { class: "payloads" });
  const next = h("div");
  const recent = h("div", { class: "scroll" });
  let drawnPayload = false;

  const act = async (run: () => Promise<unknown>, done: string) => {
    try {
      await run();
      say(done);
    } catch (err) {
      say(message(err), "error");
    }
    await load();
  };

  const load = async () => {
    try {
      const s = (await api.schedules.getSchedule(ref)).schedule!;
      swap(top,
        h("p", { id: "schedule-state" }, runState(s), s.paused && s.pause ? [" by ", s.pause.requestedBy || "—", s.pause.reason ? ` (${s.pause.reason})` : "", " at ", time(s.pause.pausedAt)] : ""),
        waiting(s),
        actions("Schedule actions", [s.paused
          ? {
            label: "Resume", call: calls.resumeSchedule,
            run: () => act(() => api.schedules.resumeSchedule({ ...ref, reason: "from the dashboard" }), `Schedule ${name} resumed: the ticks it missed while paused are skipped.`),
          }
          : {
            label: "Pause", call: calls.pauseSchedule,
            run: () => act(() => api.schedules.pauseSchedule({ ...ref, reason: "from the dashboard" }), `Schedule ${name} paused: no tick is decided until it is resumed.`),
          }]));
      swap(defn, h("h2", { id: "definition-title" }, "Definition"), definition(s));
      if (!drawnPayload) {
        swap(payload, bytesView("Payload of each task", "payload", s.payload));
        drawnPayload = true;
      }
      // In the schedule's zone, the one its expression speaks, and in the viewer's.
      const zone = s.timeZone || "UTC";
      swap(next, s.waitingForTask ? h("p", { class: "muted" }, `If task ${s.waitingForTask} has finished by then:`) : null, s.nextFires.length
        ? h("ol", { class: "fires", id: "next-fires", "aria-label": `Next fires in ${zone}, and in your time zone` },
          s.nextFires.map((t) => h("li", {}, h("span", { "data-zone": "schedule" }, time(t, zone)), h("span", { class: "muted", "data-zone": "viewer" }, " · ", time(t)))))
        : h("p", { class: "muted", id: "next-fires" }, s.paused ? "None while it is paused." : "None: the expression never fires again."));
      swap(recent, decisions(s.recent));
    } catch (err) {
      say(message(err), "error");
    }
  };

  const { control, stop } = live(load, { filter: { namespace: ns, queue, types: scheduleRecords } });
  main.replaceChildren(
    h("div", { class: "head" }, h("h1", {}, "Schedule ", h("span", { class: "ns" }, `${ns}/${queue}/`), name), control),
    top, defn, payload,
    h("h2", {}, "Next fires"), next,
    h("h2", {}, "Recent decisions"), recent,
    backfillForm(ref, load));
  return stop;
}

function definition(s: Schedule): HTMLElement {
  const row = (k: string, ...v: (Node | string)[]) => h("div", {}, h("dt", {}, k), h("dd", {}, ...v));
  const dur = (d: number | undefined) => (d === undefined ? "—" : span(d));
  const rp = s.retryPolicy;
  return h("dl", { class: "details" },
    row("Queue", h("a", { href: queueHref(s.namespace, s.queue) }, `${s.namespace}/${s.queue}`)),
    row("Cron", h("span", { class: "mono", id: "cron" }, s.cron)),
    row("Time zone", s.timeZone || "UTC", h("span", { class: "muted" }, " (its ticks; other times are in yours)")),
    row("Overlap", overlapName(s.overlap)),
    row("Catch-up window", dur(durationMs(s.catchUpWindow))),
    row("Kind", s.kind ? h("span", { class: "mono" }, s.kind) : "—"),
    row("Priority", String(s.priority)),
    row("Execution window", dur(durationMs(s.executionWindow))),
    row("Retries", rp ? `${rp.maxAttempts} attempts, backoff ${dur(durationMs(rp.initialBackoff))} × ${rp.backoffMultiplier} up to ${dur(durationMs(rp.maxBackoff))}` : "—"),
    row("Created", time(s.createdAt), s.createdBy ? ` by ${s.createdBy}` : ""),
    row("Updated", time(s.updatedAt)),
    s.heldTick ? row("Held tick", time(s.heldTick, s.timeZone || "UTC"), " (waits for the previous task)") : null);
}

/** decisions is the table of a schedule's recent decisions, newest first. */
function decisions(recent: ScheduleFire[]): HTMLElement {
  if (recent.length === 0) {
    return h("p", { class: "muted", id: "no-decisions" }, "No tick decided yet.");
  }
  return table("decisions", "The latest decisions about the schedule's ticks, newest first",
    ["Tick", "Outcome", "Reason", "Task", "Task state", "Decided"],
    [...recent].reverse().map((f) => h("tr", { "data-outcome": outcomeName(f.outcome), "data-task": f.taskId || null },
      h("td", {}, tick(f)),
      h("td", {}, h("span", { class: `badge o-${outcomeName(f.outcome)}` }, outcomeName(f.outcome))),
      h("td", {}, f.reason),
      h("td", {}, taskLink(f)),
      h("td", {}, f.taskId ? f.taskState === TaskState.UNSPECIFIED ? h("span", { class: "muted", title: "purged, or past the retention period" }, "gone") : badge(f.taskState) : ""),
      h("td", {}, time(f.at)))));
}

/**
 * localInput is a datetime-local value (the viewer's zone, to the second)
 * as milliseconds since the epoch, or undefined if empty or not a time.
 */
function localInput(v: string): number | undefined {
  const t = v ? new Date(v).getTime() : NaN;
  return Number.isNaN(t) ? undefined : t;
}

/**
 * backfillForm fires the ticks of a past range that never fired, after a
 * confirmation; disabled, with the reason, for a token that may not.
 */
function backfillForm(ref: { namespace: string; queue: string; name: string }, reload: () => Promise<void>): HTMLElement {
  const from = h("input", { id: "backfill-from", name: "start", type: "datetime-local", step: 1, required: true });
  const to = h("input", { id: "backfill-to", name: "end", type: "datetime-local", step: 1, required: true });
  const submit = h("button", { type: "submit" }, "Backfill…");
  const out = outcome("backfill-outcome");
  const why = guard(calls.backfillSchedule, [from, to, submit]);
  const inputs = { start: from, end: to };
  const form = h("form", {
    class: "filters", "aria-labelledby": "backfill-title",
    onsubmit: async (ev: Event) => {
      ev.preventDefault();
      const start = localInput(from.value);
      const end = localInput(to.value);
      if (start === undefined || end === undefined) {
        return;
      }
      const ok = await confirm(`Fire every tick of ${ref.namespace}/${ref.queue}/${ref.name} from ${from.value.replace("T", " ")} to ${to.value.replace("T", " ")} (your time zone) that never fired: one task each.`, "Backfill", false);
      if (ok === null) {
        return;
      }
      try {
        const r = await api.schedules.backfillSchedule({ ...ref, start: timestampFromMs(start), end: timestampFromMs(end) });
        showOutcome(out, inputs, { text: `Backfilled ${count(r.fired.length)} tick${r.fired.length === 1 ? "" : "s"}; ${count(r.alreadyFired)} had fired before.` });
      } catch (err) {
        showOutcome(out, inputs, { err });
      }
      await reload();
    },
  },
  h("label", { for: "backfill-from" }, "From"), from,
  h("label", { for: "backfill-to" }, "To"), to,
  submit);
  return h("section", { "aria-labelledby": "backfill-title" },
    h("h2", { id: "backfill-title" }, "Backfill"),
    h("p", { class: "muted" }, "Fires every tick of the range (both ends included) that never fired, whatever the overlap policy: at most 1000, all before the next undecided tick."),
    form, why, out);
}
