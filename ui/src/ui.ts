// Pieces every page uses: the status line, the confirmation dialog, times,
// state badges, payloads, the outcome of a form, and buttons and forms that
// a token's role may not use (disabled, with the server's reason shown
// beside them).
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { TaskState, type Progress, type Task } from "@tenure/client";
import { fieldOf, may, message } from "./api";
import { h } from "./dom";
import { bestView, exact, ms, short, showBytes, type BytesView } from "./format";

/** say shows a message in the status line (read out by screen readers). */
export function say(text: string, kind: "info" | "error" = "info"): void {
  const el = document.getElementById("status")!;
  el.textContent = text;
  el.className = `status ${kind}`;
}

/**
 * confirm asks in a modal dialog; it resolves to the reason typed (maybe
 * empty) if confirmed, or null. The dialog's button reads action. Without
 * withReason (a call that keeps no reason) the dialog asks for none.
 */
export function confirm(text: string, action: string, withReason = true): Promise<string | null> {
  const dlg = document.getElementById("confirm") as HTMLDialogElement;
  document.getElementById("confirm-title")!.textContent = action + "?";
  document.getElementById("confirm-text")!.textContent = text;
  const reason = document.getElementById("confirm-reason") as HTMLInputElement;
  reason.value = "";
  reason.hidden = !withReason;
  reason.labels?.forEach((l) => (l.hidden = !withReason));
  document.getElementById("confirm-ok")!.textContent = action;
  dlg.returnValue = "";
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok" ? reason.value : null), { once: true });
    dlg.showModal();
    (withReason ? reason : dlg.querySelector<HTMLElement>('button[value="cancel"]')!).focus();
  });
}

/**
 * time is a <time> with its zone, in the viewer's zone or in zone (an IANA
 * name), with the exact time in the viewer's zone as its title.
 */
export function time(ts: Timestamp | undefined, zone?: string): HTMLElement | string {
  const t = ms(ts);
  if (t === undefined) {
    return "—";
  }
  return h("time", { datetime: new Date(t).toISOString(), title: exact(t) }, short(t, zone));
}

/** stateName is a task state as people read it: "waiting". */
export function stateName(s: TaskState): string {
  return (TaskState[s] ?? "unknown").toLowerCase();
}

/**
 * attemptsText is a task's attempts as its retry policy counts them: those
 * used of its budget "of" the policy's maximum; for a task an operator
 * retried, also every attempt of its life, as the timeline numbers them.
 */
export function attemptsText(t: Task): string {
  const max = t.retryPolicy ? ` of ${t.retryPolicy.maxAttempts}` : "";
  const all = t.attempt !== t.attemptsUsed ? ` since an operator's retry (${t.attempt} in all)` : "";
  return `${t.attemptsUsed}${max}${all}`;
}

/**
 * progressText is what a worker last reported about the attempt it runs:
 * "40% copying part 2 of 5", "40%" or "copying part 2 of 5"; "" for none.
 */
export function progressText(p: Progress | undefined): string {
  if (!p) {
    return "";
  }
  return [p.percent !== undefined ? `${p.percent}%` : "", p.message].filter((x) => x !== "").join(" ");
}

/** progressView shows a report as a bar (when it has a percentage) and its text. */
export function progressView(p: Progress): HTMLElement {
  const bar = p.percent !== undefined ? h("progress", { max: "100", value: String(p.percent), "aria-hidden": "true" }) : null;
  return h("span", { class: "progress", id: "progress" }, bar, " ", progressText(p), " (reported ", time(p.reportedAt), ")");
}

/** badge is a task state as a coloured label. */
export function badge(s: TaskState): HTMLElement {
  const n = stateName(s);
  return h("span", { class: `badge s-${n}` }, n);
}

/** An action a page offers, made with one call of the API. */
export interface Action {
  label: string;
  /** The call it makes, as in the authorisation table. */
  call: string;
  run: () => void | Promise<void>;
  danger?: boolean;
  /** Why it does not apply here (the button is disabled with it). */
  notHere?: string;
}

let whyIDs = 0;

/** whyID is the id of the element that shows a reason. */
function whyID(): string {
  return `why-${++whyIDs}`;
}

/**
 * actions is a row of buttons. A button whose call the token's role may
 * not make, or that does not apply, is disabled, and the reason is shown
 * under the row and tied to the button (aria-describedby, title).
 */
export function actions(label: string, list: Action[]): HTMLElement {
  const reasons = new Map<string, string>(); // reason → id
  const buttons = list.map((a) => {
    const perm = may(a.call);
    const why = !perm.ok ? perm.reason : a.notHere ?? "";
    let id: string | undefined;
    if (why) {
      id = reasons.get(why);
      if (!id) {
        id = whyID();
        reasons.set(why, id);
      }
    }
    return h("button", {
      type: "button",
      class: a.danger ? "danger" : "",
      disabled: why !== "",
      title: why || null,
      "aria-describedby": id ?? null,
      "data-key": `action-${a.label}`,
      onclick: () => void a.run(),
    }, a.label);
  });
  return h("div", { class: "actions", role: "group", "aria-label": label },
    h("div", { class: "buttons" }, buttons),
    [...reasons].map(([why, id]) => h("p", { class: "why", id }, why)));
}

/**
 * guard disables the controls of a form whose call the token's role may
 * not make, tying the server's reason to each (aria-describedby, title);
 * it returns the reason to show under the form, or null if allowed.
 */
export function guard(call: string, controls: (HTMLInputElement | HTMLButtonElement)[]): HTMLElement | null {
  const perm = may(call);
  if (perm.ok) {
    return null;
  }
  const id = whyID();
  for (const c of controls) {
    c.disabled = true;
    c.title = perm.reason;
    c.setAttribute("aria-describedby", id);
  }
  return h("p", { class: "why", id }, perm.reason);
}

/**
 * showOutcome writes what a form's call did into out (an element with
 * role status, made by outcome()): text, or for an
 * error its message under the label of the field it names
 * (ErrorDetail.field, looked up in inputs), whose input is then marked
 * invalid and focused. Every input's earlier mark is cleared first.
 */
export function showOutcome(out: HTMLElement, inputs: Record<string, HTMLInputElement>, result: { text: string } | { err: unknown }): void {
  for (const el of Object.values(inputs)) {
    el.removeAttribute("aria-invalid");
  }
  if ("text" in result) {
    out.className = "outcome";
    out.dataset.field = "";
    out.textContent = result.text;
    return;
  }
  const field = fieldOf(result.err);
  const input = inputs[field];
  const label = input ? input.labels?.[0]?.textContent ?? field : field;
  out.className = "outcome error";
  out.dataset.field = field;
  // The label names the field: the message need not ("invalid argument: rate: …").
  const text = message(result.err).replace(`invalid argument: ${field}: `, "");
  out.textContent = field ? `${label} (${field}): ${text}` : text;
  if (input) {
    input.setAttribute("aria-invalid", "true");
    input.focus();
  }
}

/** outcome is the element a form's showOutcome writes into: read out by screen readers. */
export function outcome(id: string): HTMLElement {
  return h("p", { id, class: "outcome", role: "status", "aria-live": "polite" });
}

/** bytesView is a section that shows bytes as text, pretty JSON or hex, as the viewer picks. */
export function bytesView(title: string, key: string, b: Uint8Array): HTMLElement {
  const pre = h("pre", { class: "bytes", id: `${key}-bytes`, tabindex: 0, "aria-label": title });
  const note = h("p", { class: "muted" });
  const pick = h("select", { id: `${key}-view` },
    (["text", "json", "hex"] as BytesView[]).map((v) => h("option", { value: v }, v === "json" ? "JSON" : v)));
  const show = () => {
    const r = showBytes(b, pick.value as BytesView);
    pre.textContent = r.text;
    note.textContent = `${b.length} bytes${r.note ? ` — ${r.note}` : ""}`;
  };
  pick.value = bestView(b);
  pick.addEventListener("change", show);
  show();
  return h("section", { class: "payload", "aria-label": title },
    h("div", { class: "head" }, h("h2", {}, title), h("label", { for: `${key}-view` }, "Show as"), pick), note, pre);
}

/** table is a table of class cls: a caption for screen readers, the column heads and the rows. */
export function table(cls: string, caption: string, cols: string[], rows: HTMLElement[]): HTMLElement {
  return h("table", { class: cls },
    h("caption", { class: "sr-only" }, caption),
    h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows));
}
