// The timeline of a task's executions, computed from its history (the
// write-ahead log records that touched it: TaskService.GetTaskHistory).
// Pure: no DOM, no clock (the caller passes now). See pages/task.ts for
// its drawing, and docs/design/state-machine.md for what each record means.
import type { HistoryEntry } from "@tenure/client";
import { ms } from "./format";

/** One mark on the time axis. */
export interface Mark {
  type: string;
  at: number;
  /** What a person reads: "lease granted", "heartbeat", ... */
  label: string;
  lsn: bigint;
  detail: string;
}

/**
 * One execution: a lease, from its grant to its end. Its attempt number is
 * the grant's; executions a snooze ended share theirs with the next.
 */
export interface Lane {
  attempt: number;
  leaseId: string;
  workerId: string;
  from: number;
  /** The end of the attempt, or now while it runs. */
  to: number;
  running: boolean;
  /** How it ended: completed, failed, expired, killed, deadline, snoozed, committed (being finalised), running (`tenure task get` says the same). */
  outcome: string;
  marks: Mark[];
}

/** The whole timeline: one axis, the task's own marks, one lane per attempt. */
export interface Timeline {
  start: number;
  end: number;
  /** Records about the task rather than one lease: created, retried, killed without a lease. */
  task: Mark[];
  lanes: Lane[];
}

const labels: Record<string, string> = {
  TaskCreated: "created",
  LeaseGranted: "lease granted",
  ExecutionStarted: "started",
  LeaseExtended: "heartbeat",
  LeaseExpired: "lease expired",
  TaskCancelled: "refused stale action",
  TaskCommitted: "committed",
  TaskCompleted: "completed",
  TaskFailed: "failed",
  TaskSnoozed: "snoozed",
  TaskDead: "killed",
  TaskDeadlineExceeded: "deadline passed",
  TaskRetried: "retried",
};

/** label is what a person reads for a record type. */
export function label(type: string): string {
  return labels[type] ?? type;
}

/** The records that end an attempt, and what they make of it. */
const ends: Record<string, string> = {
  LeaseExpired: "expired",
  TaskFailed: "failed",
  TaskSnoozed: "snoozed",
  TaskCompleted: "completed",
  TaskDead: "killed",
  TaskDeadlineExceeded: "deadline",
};

/**
 * build lays the history out. A lease's grant names its attempt and
 * worker and opens its lane; every later record of that lease goes to the
 * lease's lane (a refused stale action too, in the lane of the stale lease
 * it names). A kill without a lease, and a passed deadline, end the lease
 * that was running. The
 * other records go to the task's row. A lane runs from its grant to the
 * record that ended it (a lease that expired after a commit ends there,
 * and the finalising attempt follows), or to now while it runs. Lanes are
 * in the order of their grants. The axis spans the first record to the
 * last, or now if an attempt is still running.
 */
export function build(entries: HistoryEntry[], now: number): Timeline {
  const task: Mark[] = [];
  const lanes: Lane[] = [];
  const byLease = new Map<string, Lane>();
  let first = Infinity;
  let last = -Infinity;
  for (const e of entries) {
    const at = ms(e.at) ?? 0;
    first = Math.min(first, at);
    last = Math.max(last, at);
    const mark: Mark = { type: e.type, at, label: label(e.type), lsn: e.lsn, detail: e.detail };
    let lane = e.leaseId ? byLease.get(e.leaseId) : undefined;
    if (!lane && e.type === "LeaseGranted") {
      lane = { attempt: e.attempt, leaseId: e.leaseId, workerId: e.workerId, from: at, to: at, running: true, outcome: "running", marks: [] };
      lanes.push(lane);
      byLease.set(e.leaseId, lane);
    }
    // A kill and a deadline name no lease: they end the lease running.
    const endsRunning = e.type === "TaskDead" || e.type === "TaskDeadlineExceeded";
    if (endsRunning && !lane) {
      task.push(mark);
      lane = lanes.find((l) => l.running);
    }
    if (!lane) {
      if (!endsRunning) {
        task.push(mark);
      }
      continue;
    }
    lane.workerId ||= e.workerId;
    lane.marks.push(mark);
    if (e.type === "LeaseGranted") {
      lane.from = Math.min(lane.from, at);
    }
    if (e.type === "TaskCommitted" && lane.running) {
      lane.outcome = "committed";
    }
    const end = ends[e.type];
    if (end && lane.running) {
      lane.running = false;
      lane.outcome = end;
      lane.to = at;
    }
    if (e.type === "TaskDead" && !lane.running) {
      lane.outcome = "killed";
    }
  }
  for (const lane of lanes) {
    if (lane.running) {
      lane.to = Math.max(now, lane.from);
      last = Math.max(last, lane.to);
    }
  }
  if (first === Infinity) {
    first = last = now;
  }
  return { start: first, end: Math.max(last, first + 1), task, lanes };
}

/** position is where t falls on the axis, from 0 to 100 (percent). */
export function position(tl: Timeline, t: number): number {
  return ((t - tl.start) / (tl.end - tl.start)) * 100;
}
