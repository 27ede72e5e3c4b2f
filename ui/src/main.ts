// The dashboard: routes (hash addresses, so that a queue, a task, a
// schedule or a workflow can be shared as a link), the token prompt, and who is signed in. Every page
// reads the public API only (api.ts). See docs/design/architecture.md, "The
// dashboard".
import "./style.css";
import { api, calls, message, may, setMe, token, unauthenticated, whoami } from "./api";
import { h } from "./dom";
import * as cluster from "./pages/cluster";
import * as overview from "./pages/overview";
import * as queue from "./pages/queue";
import * as schedules from "./pages/schedules";
import * as task from "./pages/task";
import * as workflow from "./pages/workflow";
import { say } from "./ui";

type Render = (main: HTMLElement, params: Record<string, string>) => Promise<() => void>;

/** A route: its address pattern (segments, ":name" for a parameter) and its page. */
interface Route {
  path: string[];
  title: (p: Record<string, string>) => string;
  render: Render;
}

const routes: Route[] = [
  { path: [], title: () => "Overview", render: overview.render },
  { path: ["queue", ":namespace", ":queue"], title: (p) => `Queue ${p.namespace}/${p.queue}`, render: queue.render },
  { path: ["task", ":id"], title: (p) => `Task ${p.id}`, render: task.render },
  { path: ["schedules"], title: (p) => (p.queue ? `Schedules of ${p.namespace || "default"}/${p.queue}` : "Schedules"), render: schedules.render },
  { path: ["schedule", ":namespace", ":queue", ":name"], title: (p) => `Schedule ${p.namespace}/${p.queue}/${p.name}`, render: schedules.renderOne },
  { path: ["workflows"], title: () => "Workflows", render: workflow.render },
  { path: ["workflow", ":namespace", ":id"], title: (p) => `Workflow ${p.namespace}/${p.id}`, render: workflow.renderOne },
  { path: ["cluster"], title: () => "Cluster", render: cluster.render },
];

/** The pages in the navigation. */
const navLinks: [string, string][] = [["#/", "Overview"], ["#/schedules", "Schedules"], ["#/workflows", "Workflows"], ["#/cluster", "Cluster"]];

/** match finds the route of a hash address, with its parameters and query. */
export function match(hash: string): { route: Route; params: Record<string, string> } | undefined {
  const [path, query] = hash.replace(/^#\/?/, "").split("?", 2);
  const segs = path.split("/").filter((s) => s !== "").map(decodeURIComponent);
  for (const route of routes) {
    if (route.path.length !== segs.length) {
      continue;
    }
    const params: Record<string, string> = Object.fromEntries(new URLSearchParams(query ?? ""));
    if (route.path.every((p, i) => (p.startsWith(":") ? ((params[p.slice(1)] = segs[i]), true) : p === segs[i]))) {
      return { route, params };
    }
  }
  return undefined;
}

const main = document.getElementById("main")!;
let stop: (() => void) | undefined;

async function show(): Promise<void> {
  stop?.();
  stop = undefined;
  say("");
  const m = match(location.hash);
  const nav = document.getElementById("nav")!;
  nav.replaceChildren(...navLinks.map(([href, text]) => {
    const here = (location.hash || "#/") === href;
    return h("a", { href, "aria-current": here ? "page" : null }, text);
  }));
  if (!m) {
    document.title = "Not found · tenure";
    main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, "No page has this address. ", h("a", { href: "#/" }, "Go to the overview")));
    return;
  }
  document.title = `${m.route.title(m.params)} · tenure`;
  stop = await m.route.render(main, m.params);
}

/** who shows the signed-in token and what its role may not do. */
function drawWho(): void {
  const who = document.getElementById("who")!;
  const me = whoami();
  if (!me || !me.authEnabled) {
    who.replaceChildren(h("span", { class: "muted", title: "the server runs without --auth-file: every call is allowed" }, "authentication off"));
    return;
  }
  const denied = [calls.retryTask, calls.pauseQueue].some((c) => !may(c).ok);
  who.replaceChildren(
    h("span", { id: "whoami", title: `namespaces: ${me.namespaces.join(", ")}${me.queues.length ? `; queues: ${me.queues.join(", ")}` : ""}` },
      "signed in as ", h("strong", {}, me.name), ` (${me.role})`, denied ? h("span", { class: "muted" }, " · read only") : ""),
    h("button", {
      type: "button", onclick: () => {
        token.clear();
        setMe(undefined);
        void start();
      },
    }, "Sign out"));
}

/** prompt asks for a token; the page starts again once one is given. */
function prompt(why: string): void {
  stop?.();
  stop = undefined;
  document.getElementById("who")!.replaceChildren();
  document.title = "Sign in · tenure";
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const form = h("form", {
    class: "signin", "aria-labelledby": "signin-title",
    onsubmit: (ev: Event) => {
      ev.preventDefault();
      token.set(input.value.trim());
      void start();
    },
  },
  h("h1", { id: "signin-title" }, "Sign in"),
  h("p", {}, "This server needs a bearer token (tenure token create). It is kept for this browser tab only (sessionStorage) and sent with each call."),
  why ? h("p", { class: "error", role: "alert" }, why) : null,
  h("label", { for: "token" }, "Token"), input,
  h("button", { type: "submit" }, "Sign in"));
  main.replaceChildren(form);
  input.focus();
}

/** start learns who the caller is (asking for a token if needed), then shows the page. */
async function start(): Promise<void> {
  try {
    setMe(await api.admin.whoAmI({}));
  } catch (err) {
    if (unauthenticated(err)) {
      const had = token.get() !== undefined;
      token.clear();
      prompt(had ? `The token was refused: ${message(err)}` : "");
      return;
    }
    say(message(err), "error");
    return;
  }
  drawWho();
  await show();
}

window.addEventListener("hashchange", () => {
  if (whoami()) {
    void show().then(() => main.focus({ preventScroll: true }));
  }
});
void start();

// The skip link moves the focus without changing the address (the
// address is the route).
document.querySelector(".skip")?.addEventListener("click", (ev) => {
  ev.preventDefault();
  main.focus();
});
