// Pieces every page uses: the status line, the confirmation dialog, times,
// state badges, and buttons that a token's role may not use (disabled,
// with the server's reason shown beside them).
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { TaskState } from "@tenure/client";
import { may } from "./api";
import { h } from "./dom";
import { exact, ms, short } from "./format";

/** say shows a message in the status line (read out by screen readers). */
export function say(text: string, kind: "info" | "error" = "info"): void {
  const el = document.getElementById("status")!;
  el.textContent = text;
  el.className = `status ${kind}`;
}

/**
 * confirm asks in a modal dialog; it resolves to the reason typed (maybe
 * empty) if confirmed, or null. The dialog's button reads action.
 */
export function confirm(text: string, action: string): Promise<string | null> {
  const dlg = document.getElementById("confirm") as HTMLDialogElement;
  document.getElementById("confirm-title")!.textContent = action + "?";
  document.getElementById("confirm-text")!.textContent = text;
  const reason = document.getElementById("confirm-reason") as HTMLInputElement;
  reason.value = "";
  document.getElementById("confirm-ok")!.textContent = action;
  dlg.returnValue = "";
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok" ? reason.value : null), { once: true });
    dlg.showModal();
    reason.focus();
  });
}

/** time is a <time> in the viewer's zone with the exact time as its title. */
export function time(ts: Timestamp | undefined): HTMLElement | string {
  const t = ms(ts);
  if (t === undefined) {
    return "—";
  }
  return h("time", { datetime: new Date(t).toISOString(), title: exact(t) }, short(t));
}

/** stateName is a task state as people read it: "waiting". */
export function stateName(s: TaskState): string {
  return (TaskState[s] ?? "unknown").toLowerCase();
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
        id = `why-${++whyIDs}`;
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
