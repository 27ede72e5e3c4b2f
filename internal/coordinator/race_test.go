//go:build race

package coordinator

// The race detector slows the property test about sixfold; under it the
// default run is smaller, and CI runs the full count without it.
func init() { defaultPropSeeds = 300 }
