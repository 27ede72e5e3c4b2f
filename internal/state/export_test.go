package state

// SetHashMask keeps only the bits of mask of every index hash, so that keys
// collide, and returns a function that restores full hashes. The indexes
// must be empty when it is called and when the restore function is (a hash
// changes with the mask).
func SetHashMask(mask uint64) (restore func()) {
	hashMask = mask
	return func() { hashMask = ^uint64(0) }
}
