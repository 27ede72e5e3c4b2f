//go:build race

package state_test

// The race detector slows the property tests of keys several times over;
// under it the default run is smaller, and CI runs the full count without
// it.
func init() { defaultKeySeeds = 8 }
