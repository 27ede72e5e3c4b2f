// Live refresh: a page's data is read again every few seconds while the
// "Live" box is ticked; the box's state holds across pages.
import { h } from "./dom";
import { clock } from "./format";

const every = 2000;
let on = true;

/**
 * live runs load now and then every two seconds while live refresh is on,
 * never two at once. It returns the control to put on the page (a
 * labelled checkbox and the time of the last update) and the function that
 * stops it.
 */
export function live(load: () => Promise<void>): { control: HTMLElement; stop: () => void } {
  let timer: number | undefined;
  let stopped = false;
  let refreshes = 0;
  let busy = false;
  const updated = h("span", { class: "updated" });
  const tick = async () => {
    timer = undefined;
    busy = true;
    try {
      await load();
      updated.textContent = `updated ${clock(Date.now())}`;
      // How many times the page was drawn: a test waits for refreshes by it.
      control.dataset.refreshes = String(++refreshes);
    } finally {
      busy = false;
      if (!stopped && on) {
        timer = window.setTimeout(tick, every);
      }
    }
  };
  const box = h("input", {
    type: "checkbox", id: "live", checked: on,
    onchange: () => {
      on = box.checked;
      if (on && timer === undefined && !busy) {
        void tick();
      } else if (!on && timer !== undefined) {
        window.clearTimeout(timer);
        timer = undefined;
      }
    },
  });
  const control = h("div", { class: "live" }, box, h("label", { for: "live" }, "Live"), " ", updated);
  void tick();
  return {
    control,
    stop: () => {
      stopped = true;
      window.clearTimeout(timer);
    },
  };
}
