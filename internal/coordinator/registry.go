package coordinator

import (
	"sort"
	"time"
)

// registry is the coordinator's worker registry: soft state about workers
// (last contact, leases held, advertised capacity). It is advisory only,
// never enters the log, starts empty after a restart and is rebuilt as
// workers call in. Guarded by the coordinator's mutex.
type registry struct {
	workers map[string]*WorkerInfo
}

// WorkerInfo is what the coordinator last heard from a worker.
type WorkerInfo struct {
	WorkerID string
	LastSeen time.Time
	// ActiveLeases counts the leases granted to the worker and not yet
	// ended, as far as this coordinator has seen since it started.
	ActiveLeases int
	// Capacity is the most tasks the worker asked for in one lease call.
	Capacity int
}

func newRegistry() *registry { return &registry{workers: make(map[string]*WorkerInfo)} }

func (r *registry) get(id string) *WorkerInfo {
	w := r.workers[id]
	if w == nil {
		w = &WorkerInfo{WorkerID: id}
		r.workers[id] = w
	}
	return w
}

func (r *registry) seen(id string, at time.Time, capacity int) {
	w := r.get(id)
	w.LastSeen = at
	w.Capacity = capacity
}

func (r *registry) leased(id string) { r.get(id).ActiveLeases++ }

func (r *registry) released(id string) {
	if w := r.workers[id]; w != nil && w.ActiveLeases > 0 {
		w.ActiveLeases--
	}
}

func (r *registry) len() int { return len(r.workers) }

// forget drops workers not seen since before cutoff and holding no lease.
func (r *registry) forget(cutoff time.Time) {
	for id, w := range r.workers {
		if w.ActiveLeases == 0 && w.LastSeen.Before(cutoff) {
			delete(r.workers, id)
		}
	}
}

// Workers lists the workers the coordinator knows of, by id. Workers idle
// for more than an hour are forgotten.
func (c *Coordinator) Workers() []WorkerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.workers.forget(c.cfg.Clock.Now().Add(-time.Hour))
	out := make([]WorkerInfo, 0, len(c.workers.workers))
	for _, w := range c.workers.workers {
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].WorkerID < out[j].WorkerID })
	return out
}
