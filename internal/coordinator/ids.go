package coordinator

import (
	"crypto/rand"
	"encoding/binary"
	"io"
	"time"
)

// crockford is the Crockford base32 alphabet, lower case.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// idRandBytes is the random part of an id: 80 bits.
const idRandBytes = 10

// newID returns a 26-character id: 48 bits of milliseconds since the epoch
// then 80 random bits, in Crockford base32 (the ULID layout), so ids sort
// roughly by creation time and never collide in practice.
func newID(now time.Time, r *idRand) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	r.fill(b[6:])
	return encodeID(binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]))
}

// encodeID writes 128 bits as 26 base32 digits: the first digit carries
// the top 3 bits.
func encodeID(hi, lo uint64) string {
	var out [26]byte
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// idRand hands out the random bits of ids from src, read a block of 64
// ids' worth at a time: one read of the source per 64 ids, not one each.
// The bytes come out in the source's order, so a seeded source gives the
// same ids. It is not safe for concurrent use: the coordinator uses it
// under its lock.
type idRand struct {
	src io.Reader
	buf [64 * idRandBytes]byte
	off int // bytes of buf handed out; len(buf) when empty
}

func newIDRand(src io.Reader) *idRand {
	r := &idRand{src: src}
	r.off = len(r.buf)
	return r
}

// fill fills p (idRandBytes long) with the next random bytes.
func (r *idRand) fill(p []byte) {
	if r.off+len(p) > len(r.buf) {
		if _, err := io.ReadFull(r.src, r.buf[:]); err != nil {
			// crypto/rand never fails on supported platforms, and test
			// sources are infinite; an id source that fails is a
			// programming error.
			panic("coordinator: id source failed: " + err.Error())
		}
		r.off = 0
	}
	r.off += copy(p, r.buf[r.off:])
}

var cryptoRand io.Reader = rand.Reader
