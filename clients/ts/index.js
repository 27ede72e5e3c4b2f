// @tenure/client: tenure's API (proto/tenure/v1) for Node.js (18 or later)
// and browsers, over Connect with JSON bodies. The messages and services
// are generated into gen/ (`make ui`); this file adds one way to make the
// eight clients with a bearer token. See docs/guides/typescript-client.md.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService } from "./gen/tenure/v1/admin_pb.js";
import { ErrorDetailSchema } from "./gen/tenure/v1/errors_pb.js";
import { EventService } from "./gen/tenure/v1/events_pb.js";
import { OutboxService } from "./gen/tenure/v1/outbox_pb.js";
import { QueueService } from "./gen/tenure/v1/queue_pb.js";
import { ScheduleService } from "./gen/tenure/v1/schedule_pb.js";
import { TaskService } from "./gen/tenure/v1/task_pb.js";
import { WorkerService } from "./gen/tenure/v1/worker_pb.js";
import { WorkflowService } from "./gen/tenure/v1/workflow_pb.js";

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

/**
 * Clients of the eight services of a tenure server at baseUrl (e.g.
 * "http://127.0.0.1:7070"; "" in a page the server itself serves).
 * options.token is the bearer token, or a function that returns it at
 * each call ("" or undefined: none); options.fetch replaces the global
 * fetch.
 */
export function createTenureClient(baseUrl, options = {}) {
  const token = options.token;
  const bearer = (next) => async (req) => {
    const t = typeof token === "function" ? token() : token;
    if (t) {
      req.header.set("Authorization", "Bearer " + t);
    }
    return next(req);
  };
  const transport = createConnectTransport({
    baseUrl,
    useBinaryFormat: false,
    interceptors: [bearer],
    fetch: options.fetch,
  });
  return {
    tasks: createClient(TaskService, transport),
    workers: createClient(WorkerService, transport),
    queues: createClient(QueueService, transport),
    admin: createClient(AdminService, transport),
    schedules: createClient(ScheduleService, transport),
    events: createClient(EventService, transport),
    outbox: createClient(OutboxService, transport),
    workflows: createClient(WorkflowService, transport),
  };
}

/**
 * The tenure.v1.ErrorDetail of an error the server answered (its reason,
 * task, field, ...), or undefined for any other error.
 */
export function errorDetail(err) {
  if (!(err instanceof ConnectError)) {
    return undefined;
  }
  return err.findDetails(ErrorDetailSchema)[0];
}
