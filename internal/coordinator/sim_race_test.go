//go:build race

package coordinator

// The race detector slows the simulation several times over; under it the
// default run is smaller, and CI runs the full count without it.
func init() {
	defaultSimSeeds = 150
	defaultWfSimSeeds = 4
}

func init() { defaultSchedSimSeeds = 2 }
