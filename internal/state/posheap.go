package state

// posHeap is the storage of a binary heap of elements that each record
// their position in it, so that one can be removed (heap.Remove) or moved
// (heap.Fix) in O(log n): the Len, Swap, Push and Pop of
// container/heap.Interface, written once for the heaps of tasks
// (taskHeap), waiting ages (ageIndex) and deadlines (deadlineIndex). The
// type that embeds it adds Less. An element that leaves the heap is at
// position -1.
type posHeap[P heapElem] struct {
	items []P
}

// heapElem is an element of a posHeap: heapPos says where it records its
// position.
type heapElem interface {
	heapPos() *int32
}

func (h *posHeap[P]) Len() int { return len(h.items) }

func (h *posHeap[P]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.items[i].heapPos(), *h.items[j].heapPos() = int32(i), int32(j)
}

func (h *posHeap[P]) Push(x any) {
	e := x.(P)
	*e.heapPos() = int32(len(h.items))
	h.items = append(h.items, e)
}

func (h *posHeap[P]) Pop() any {
	n := len(h.items) - 1
	e := h.items[n]
	var none P
	h.items[n] = none
	h.items = h.items[:n]
	*e.heapPos() = -1
	return e
}
