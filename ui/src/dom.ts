// A few helpers to build the DOM without a framework.

type Child = Node | string | number | null | undefined | false | Child[];
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

/**
 * h builds an element: attributes (on* keys are event listeners, false or
 * null leaves an attribute out, true sets it empty) and children (strings
 * become text; null, undefined and false are skipped; arrays flatten).
 */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) {
      continue;
    }
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v);
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

/** svg builds an SVG element as h builds an HTML one (no listeners). */
export function svg(tag: string, attrs: Record<string, string | number | null | undefined> = {}, ...children: Child[]): SVGElement {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== null && v !== undefined) {
      el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

/** append adds children to el as h does. */
export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) {
      continue;
    }
    if (Array.isArray(c)) {
      append(el, c);
    } else if (c instanceof Node) {
      el.appendChild(c);
    } else {
      el.appendChild(document.createTextNode(String(c)));
    }
  }
}

/** What a person did to an element that a redraw must keep. */
interface Kept {
  open?: boolean;
  top: number;
  left: number;
  value?: string;
  checked?: boolean;
}

/**
 * kept reads, from the elements of container with a data-key, what a
 * person may have changed: a <details> opened or closed, a scroll
 * position, a value typed or picked.
 */
function kept(container: Element): Map<string, Kept> {
  const out = new Map<string, Kept>();
  for (const el of container.querySelectorAll<HTMLElement>("[data-key]")) {
    const k: Kept = { top: el.scrollTop, left: el.scrollLeft };
    if (el instanceof HTMLDetailsElement) {
      k.open = el.open;
    }
    if (el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement) {
      if (el.value !== el.defaultValue) {
        k.value = el.value;
      }
      if (el instanceof HTMLInputElement && el.checked !== el.defaultChecked) {
        k.checked = el.checked;
      }
    }
    if (el instanceof HTMLSelectElement) {
      k.value = el.value;
    }
    out.set(el.dataset.key!, k);
  }
  return out;
}

/** restore gives the elements of container with a data-key what kept read from their predecessors. */
function restore(container: Element, state: Map<string, Kept>): void {
  for (const el of container.querySelectorAll<HTMLElement>("[data-key]")) {
    const k = state.get(el.dataset.key!);
    if (!k) {
      continue;
    }
    if (el instanceof HTMLDetailsElement && k.open !== undefined) {
      el.open = k.open;
    }
    if ((el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement || el instanceof HTMLSelectElement) && k.value !== undefined) {
      el.value = k.value;
    }
    if (el instanceof HTMLInputElement && k.checked !== undefined) {
      el.checked = k.checked;
    }
    if (k.top !== 0 || k.left !== 0) {
      el.scrollTop = k.top;
      el.scrollLeft = k.left;
    }
  }
}

/**
 * swap replaces the children of container, keeping what a person did to
 * the elements that carry a data-key: the keyboard focus, a <details>
 * opened, a scroll position, a value typed. A live refresh must not close
 * what the viewer opened, or throw a keyboard user back to the top.
 */
export function swap(container: Element, ...children: Child[]): void {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.getAttribute("data-key") : null;
  const state = kept(container);
  container.replaceChildren();
  append(container, children);
  restore(container, state);
  if (key !== null) {
    const again = container.querySelector<HTMLElement>(`[data-key="${CSS.escape(key)}"]`);
    again?.focus();
  }
}
