// Submits a task to the tenure server at $TENURE_ADDR, as the command line
// reads it (default http://127.0.0.1:7070; http:// when it names no
// scheme), reads it back and prints its id, state and the queue's waiting
// count as one JSON line. $TENURE_TOKEN, if set, is the
// bearer token. Run: node clients/ts/examples/submit.mjs
import { createTenureClient, TaskState } from "@tenure/client";

const addr = process.env.TENURE_ADDR || "http://127.0.0.1:7070";
const url = /^https?:\/\//.test(addr) ? addr : `http://${addr}`;
const tenure = createTenureClient(url, { token: process.env.TENURE_TOKEN });

const { task } = await tenure.tasks.submit({
  queue: "emails",
  payload: new TextEncoder().encode(JSON.stringify({ to: "ada@example.com" })),
});
const got = await tenure.tasks.getTask({ taskId: task.taskId });
const { queue } = await tenure.queues.getQueue({ queue: "emails" });
console.log(JSON.stringify({
  taskId: got.task.taskId,
  state: TaskState[got.task.state],
  waiting: Number(queue.tasks.waiting),
}));
