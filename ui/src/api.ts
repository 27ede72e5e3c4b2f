// The dashboard's way to the server: the public API only, through
// @tenure/client (Connect with JSON bodies), with the token of this browser
// session (sessionStorage: gone when the tab closes).
import { Code, ConnectError, createTenureClient, errorDetail, type WhoAmIResponse } from "@tenure/client";

const tokenKey = "tenure.token";

/** The bearer token of this browser session. */
export const token = {
  get(): string | undefined {
    return sessionStorage.getItem(tokenKey) ?? undefined;
  },
  set(t: string): void {
    sessionStorage.setItem(tokenKey, t);
  },
  clear(): void {
    sessionStorage.removeItem(tokenKey);
  },
};

/** The clients of the server that serves the page. */
export const api = createTenureClient(window.location.origin, { token: () => token.get() });

/** The caller, as AdminService.WhoAmI said; set once signed in. */
let me: WhoAmIResponse | undefined;

/** setMe records who the caller is. */
export function setMe(w: WhoAmIResponse | undefined): void {
  me = w;
}

/** whoami is the caller, as last read. */
export function whoami(): WhoAmIResponse | undefined {
  return me;
}

/** Names of the calls the dashboard makes, as in the authorisation table. */
export const calls = {
  retryTask: "/tenure.v1.TaskService/RetryTask",
  killTask: "/tenure.v1.TaskService/KillTask",
  retryTasks: "/tenure.v1.TaskService/RetryTasks",
  killTasks: "/tenure.v1.TaskService/KillTasks",
  purgeTasks: "/tenure.v1.TaskService/PurgeTasks",
  pauseQueue: "/tenure.v1.QueueService/PauseQueue",
  resumeQueue: "/tenure.v1.QueueService/ResumeQueue",
  setQueueLimits: "/tenure.v1.QueueService/SetQueueLimits",
  listSchedules: "/tenure.v1.ScheduleService/ListSchedules",
  pauseSchedule: "/tenure.v1.ScheduleService/PauseSchedule",
  resumeSchedule: "/tenure.v1.ScheduleService/ResumeSchedule",
  backfillSchedule: "/tenure.v1.ScheduleService/BackfillSchedule",
  getCluster: "/tenure.v1.AdminService/GetCluster",
  listTasks: "/tenure.v1.TaskService/ListTasks",
  listOutboxes: "/tenure.v1.OutboxService/ListOutboxes",
  cancelWorkflow: "/tenure.v1.WorkflowService/CancelWorkflow",
  retryWorkflow: "/tenure.v1.WorkflowService/RetryWorkflow",
};

/**
 * may says whether the caller's token may make call, and if not why (the
 * server's own reason, from WhoAmI). With authentication off everything
 * is allowed.
 */
export function may(call: string): { ok: boolean; reason: string } {
  if (!me || !me.authEnabled) {
    return { ok: true, reason: "" };
  }
  const c = me.calls.find((x) => x.call === call);
  if (!c) {
    return { ok: false, reason: `this server does not list ${call}` };
  }
  return { ok: c.allowed, reason: c.reason };
}

/** unauthenticated reports whether err is the server asking for a (valid) token. */
export function unauthenticated(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Unauthenticated;
}

/** message is what to tell a person about err. */
export function message(err: unknown): string {
  if (err instanceof ConnectError) {
    // The code before the message, unless the message says it already
    // ("invalid argument: …", not "InvalidArgument: invalid argument: …").
    const words = (Code[err.code] ?? "").replace(/(?<=[a-z])(?=[A-Z])/g, " ").toLowerCase();
    return words && err.rawMessage.toLowerCase().includes(words) ? err.rawMessage : `${Code[err.code]}: ${err.rawMessage}`;
  }
  return err instanceof Error ? err.message : String(err);
}

/**
 * fieldOf is the request field that err names (ErrorDetail.field, as the
 * request spells it: "rate", "end"), or "" if it names none.
 */
export function fieldOf(err: unknown): string {
  return errorDetail(err)?.field ?? "";
}

/**
 * namespaces are the namespaces to list queues of: every one ("") for a
 * token of namespace * or without authentication, else the token's own.
 */
export function namespaces(): string[] {
  if (!me || !me.authEnabled || me.namespaces.includes("*")) {
    return [""];
  }
  return me.namespaces;
}
