// Types of index.js (hand-written; gen/ is generated).
import type { Client } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import type { AdminService } from "./gen/tenure/v1/admin_pb.js";
import type { ErrorDetail } from "./gen/tenure/v1/errors_pb.js";
import type { EventService } from "./gen/tenure/v1/events_pb.js";
import type { OutboxService } from "./gen/tenure/v1/outbox_pb.js";
import type { QueueService } from "./gen/tenure/v1/queue_pb.js";
import type { ScheduleService } from "./gen/tenure/v1/schedule_pb.js";
import type { TaskService } from "./gen/tenure/v1/task_pb.js";
import type { WorkerService } from "./gen/tenure/v1/worker_pb.js";
import type { WorkflowService } from "./gen/tenure/v1/workflow_pb.js";

export * from "./gen/tenure/v1/admin_pb.js";
export * from "./gen/tenure/v1/errors_pb.js";
export * from "./gen/tenure/v1/events_pb.js";
export * from "./gen/tenure/v1/outbox_pb.js";
export * from "./gen/tenure/v1/queue_pb.js";
export * from "./gen/tenure/v1/schedule_pb.js";
export * from "./gen/tenure/v1/task_pb.js";
export * from "./gen/tenure/v1/worker_pb.js";
export * from "./gen/tenure/v1/workflow_pb.js";
export { Code, ConnectError };

/** Options of createTenureClient. */
export interface TenureClientOptions {
  /** The bearer token, or a function returning it at each call. */
  token?: string | (() => string | undefined);
  /** Replaces the global fetch. */
  fetch?: typeof globalThis.fetch;
}

/** The eight services of one tenure server. */
export interface TenureClient {
  tasks: Client<typeof TaskService>;
  workers: Client<typeof WorkerService>;
  queues: Client<typeof QueueService>;
  admin: Client<typeof AdminService>;
  schedules: Client<typeof ScheduleService>;
  events: Client<typeof EventService>;
  outbox: Client<typeof OutboxService>;
  workflows: Client<typeof WorkflowService>;
}

/** Clients of the services of the tenure server at baseUrl. */
export declare function createTenureClient(baseUrl: string, options?: TenureClientOptions): TenureClient;

/** The tenure.v1.ErrorDetail of an error the server answered, if any. */
export declare function errorDetail(err: unknown): ErrorDetail | undefined;
