// The layout of a workflow's graph: its tasks in layers, top to bottom,
// each below every task it depends on and the task that spawned it.
// Pure: no DOM. See pages/workflow.ts for its drawing.

/** One task of the graph, in creation order (its dependencies and parent come before it). */
export interface GraphTask {
  id: string;
  deps: string[];
  parent: string;
}

/** A box: one task, or the tasks of a layer past maxPerLayer, in one. */
export interface Box {
  /** The task's id; for a box of several, "more-" and its layer. */
  id: string;
  /** The ids of the tasks it stands for: one, or the rest of its layer. */
  tasks: string[];
  layer: number;
  x: number;
  y: number;
}

/** An edge between two boxes: a dependency, or a spawn (from the parent). */
export interface Edge {
  from: string;
  to: string;
  spawn: boolean;
}

export interface Layout {
  boxes: Box[];
  edges: Edge[];
  width: number;
  height: number;
}

export const boxW = 150;
export const boxH = 46;
const gapX = 16;
const gapY = 48;
const margin = 8;

/**
 * layout places tasks in layers: a task's layer is one past the deepest of
 * its dependencies and parent among tasks (those outside the graph do not
 * count); within a layer, in creation order. A layer of more than
 * maxPerLayer tasks shows maxPerLayer - 1 of them and one box for the
 * rest, so that a fan-out of thousands stays readable.
 */
export function layout(tasks: GraphTask[], maxPerLayer: number): Layout {
  const layerOf = new Map<string, number>();
  const layers: string[][] = [];
  for (const t of tasks) {
    let l = 0;
    for (const d of [...t.deps, t.parent]) {
      const dl = layerOf.get(d);
      if (dl !== undefined) {
        l = Math.max(l, dl + 1);
      }
    }
    layerOf.set(t.id, l);
    (layers[l] ??= []).push(t.id);
  }
  const boxOf = new Map<string, string>();
  const boxes: Box[] = [];
  let widest = 0;
  layers.forEach((ids, l) => {
    const shown = ids.length > maxPerLayer ? ids.slice(0, maxPerLayer - 1) : ids;
    const row: Box[] = shown.map((id) => ({ id, tasks: [id], layer: l, x: 0, y: 0 }));
    if (shown.length < ids.length) {
      row.push({ id: `more-${l}`, tasks: ids.slice(shown.length), layer: l, x: 0, y: 0 });
    }
    for (const b of row) {
      for (const id of b.tasks) {
        boxOf.set(id, b.id);
      }
    }
    widest = Math.max(widest, row.length);
    boxes.push(...row);
  });
  const width = Math.max(widest * (boxW + gapX) - gapX, boxW) + 2 * margin;
  const rowWidth = new Map<number, number>();
  for (const b of boxes) {
    rowWidth.set(b.layer, (rowWidth.get(b.layer) ?? 0) + 1);
  }
  const placed = new Map<number, number>();
  for (const b of boxes) {
    const n = rowWidth.get(b.layer)!;
    const i = placed.get(b.layer) ?? 0;
    placed.set(b.layer, i + 1);
    const start = (width - (n * (boxW + gapX) - gapX)) / 2;
    b.x = start + i * (boxW + gapX);
    b.y = margin + b.layer * (boxH + gapY);
  }
  const seen = new Set<string>();
  const edges: Edge[] = [];
  const add = (from: string | undefined, to: string, spawn: boolean) => {
    const key = `${from}>${to}>${spawn}`;
    if (from === undefined || from === to || seen.has(key)) {
      return;
    }
    seen.add(key);
    edges.push({ from, to, spawn });
  };
  for (const t of tasks) {
    const to = boxOf.get(t.id)!;
    for (const d of t.deps) {
      add(boxOf.get(d), to, false);
    }
    if (t.parent) {
      add(boxOf.get(t.parent), to, true);
    }
  }
  return { boxes, edges, width, height: layers.length * (boxH + gapY) - gapY + 2 * margin };
}
