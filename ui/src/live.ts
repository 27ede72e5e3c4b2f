// Live updates: a page's data is read again when the server's event stream
// (EventService.WatchEvents, docs/guides/events.md) says something the
// page shows changed, and every little while for what changes with time
// alone (ages, the minutes of a sparkline); without a stream (the token
// may not watch what the page shows, or the server has none) every two
// seconds. The "Live" box's state holds across pages.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Event, type EventFilterSchema } from "@tenure/client";
import { api } from "./api";
import { h } from "./dom";
import { clock } from "./format";

/** Reads without a stream, and reads for time alone with one. */
const poll = 2000;
const timeOnly = 15000;
/** The least time between two reads that events ask for. */
const gap = 250;
/** The wait before a stream that broke is opened again. */
const reopen = 1000;

let on = true;

/** What a page watches: the filter of its events, and what to do with them. */
export interface Watch {
  filter: MessageInitShape<typeof EventFilterSchema>;
  /** events, if set, is handed the events of each answer, as they come. */
  events?: (evs: Event[]) => void;
}

/**
 * live runs load now, then again after each answer of the event stream
 * of watch that carries events (at most one load at a time, and one every
 * 250 ms), and every 15 seconds; without watch, or when the stream is
 * refused, every two seconds. It returns the control to put on the page
 * (a labelled checkbox, how the page is kept up to date and the time of
 * the last update) and the function that stops it.
 */
export function live(load: () => Promise<void>, watch?: Watch): { control: HTMLElement; stop: () => void } {
  let timer: number | undefined;
  let stopped = false;
  let refreshes = 0;
  let busy = false;
  let again = false; // events came during a load: load once more after it
  let last = 0; // when the last load started
  let streaming = false;
  let abort: AbortController | undefined;
  let cursor = "now";
  const updated = h("span", { class: "updated" });
  const how = h("span", { class: "how muted" });
  const every = () => (streaming ? timeOnly : poll);

  const tick = async () => {
    window.clearTimeout(timer);
    timer = undefined;
    busy = true;
    last = Date.now();
    try {
      await load();
      updated.textContent = `updated ${clock(Date.now())}`;
      // How many times the page was drawn: a test waits for refreshes by it.
      control.dataset.refreshes = String(++refreshes);
    } finally {
      busy = false;
      if (!stopped && on) {
        if (again) {
          again = false;
          timer = window.setTimeout(tick, Math.max(0, gap - (Date.now() - last)));
        } else {
          timer = window.setTimeout(tick, every());
        }
      }
    }
  };
  // changed asks for a load soon: now, or after the one running.
  const changed = () => {
    if (!on || stopped) {
      return;
    }
    if (busy) {
      again = true;
      return;
    }
    window.clearTimeout(timer);
    timer = window.setTimeout(tick, Math.max(0, gap - (Date.now() - last)));
  };
  const setHow = (s: boolean) => {
    streaming = s;
    how.textContent = s ? "from the event stream" : "every 2 s";
    control.dataset.stream = s ? "on" : "off";
  };

  // stream follows the page's events from cursor, opening the stream
  // again after a break, until it is refused or the page stops watching.
  const stream = async () => {
    if (!watch) {
      return;
    }
    while (!stopped && on) {
      abort = new AbortController();
      try {
        for await (const ans of api.events.watchEvents({ cursor, filter: watch.filter }, { signal: abort.signal })) {
          setHow(true);
          if (ans.events.length > 0) {
            watch.events?.(ans.events);
            changed();
          }
          cursor = ans.cursor || cursor;
        }
      } catch (err) {
        if (abort.signal.aborted) {
          return;
        }
        if (err instanceof ConnectError && [Code.PermissionDenied, Code.Unimplemented, Code.InvalidArgument, Code.OutOfRange].includes(err.code)) {
          setHow(false);
          changed();
          return; // polled from now on
        }
      }
      setHow(false);
      await new Promise((resolve) => window.setTimeout(resolve, reopen));
    }
  };

  const box = h("input", {
    type: "checkbox", id: "live", checked: on,
    onchange: () => {
      on = box.checked;
      if (on) {
        changed();
        void stream();
      } else {
        window.clearTimeout(timer);
        timer = undefined;
        abort?.abort();
      }
    },
  });
  const control = h("div", { class: "live" }, box, h("label", { for: "live" }, "Live"), " ", how, " ", updated);
  setHow(false);
  void tick();
  if (on) {
    void stream();
  }
  return {
    control,
    stop: () => {
      stopped = true;
      window.clearTimeout(timer);
      abort?.abort();
    },
  };
}
