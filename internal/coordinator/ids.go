package coordinator

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	"time"
)

// crockford is the Crockford base32 alphabet, lower case.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// newID returns a 26-character id: 48 bits of milliseconds since the epoch
// then 80 random bits, in Crockford base32 (the ULID layout), so ids sort
// roughly by creation time and never collide in practice.
func newID(now time.Time, r io.Reader) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	if _, err := io.ReadFull(r, b[6:]); err != nil {
		// crypto/rand never fails on supported platforms, and test sources
		// are infinite; an id source that fails is a programming error.
		panic("coordinator: id source failed: " + err.Error())
	}
	var out [26]byte
	// 128 bits as 26 base32 digits: the first digit carries the top 3 bits.
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

var cryptoRand io.Reader = rand.Reader
