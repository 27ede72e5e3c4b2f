package events

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Pos is a position in one partition: the LSN of the last record a stream
// has passed there (0: none yet, so the next is LSN 1).
type Pos struct {
	Partition uint64
	LSN       uint64
}

// Cursor is a position in every partition a stream reads, in increasing
// order of partition. A partition it does not name is read from its first
// record.
type Cursor []Pos

// cursorVersion is the first byte of every encoded cursor.
const cursorVersion = 1

// MaxCursorPartitions bounds the partitions a cursor names, so that a
// decoder never allocates much for a hostile one.
const MaxCursorPartitions = 1 << 16

// ErrBadCursor is what ParseCursor refuses.
var ErrBadCursor = errors.New("events: not a cursor")

// String encodes c: base64url, without padding, of version 1, the count of
// positions, then each partition and LSN, all uvarints
// (docs/design/events.md).
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString(c.AppendBinary(nil))
}

// AppendBinary appends c's bytes (before base64) to b.
func (c Cursor) AppendBinary(b []byte) []byte {
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(len(c)))
	for _, p := range c {
		b = binary.AppendUvarint(b, p.Partition)
		b = binary.AppendUvarint(b, p.LSN)
	}
	return b
}

// ParseCursor decodes a cursor String made. Anything else is an error
// wrapping ErrBadCursor that says what is wrong.
func ParseCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not base64url (a cursor is copied whole from an event or an answer)", ErrBadCursor, short(s))
	}
	if len(b) == 0 || b[0] != cursorVersion {
		return nil, fmt.Errorf("%w: %q is of an unknown version (this server reads version %d)", ErrBadCursor, short(s), cursorVersion)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > MaxCursorPartitions || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %q has a bad count of partitions", ErrBadCursor, short(s))
	}
	b = b[k:]
	c := make(Cursor, 0, n)
	for i := uint64(0); i < n; i++ {
		var p Pos
		if p.Partition, k = binary.Uvarint(b); k <= 0 {
			return nil, fmt.Errorf("%w: %q is cut short", ErrBadCursor, short(s))
		}
		b = b[k:]
		if p.LSN, k = binary.Uvarint(b); k <= 0 {
			return nil, fmt.Errorf("%w: %q is cut short", ErrBadCursor, short(s))
		}
		b = b[k:]
		if i > 0 && p.Partition <= c[i-1].Partition {
			return nil, fmt.Errorf("%w: %q names its partitions out of order", ErrBadCursor, short(s))
		}
		c = append(c, p)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %q has %d bytes too many", ErrBadCursor, short(s), len(b))
	}
	return c, nil
}

// short is s cut for a message.
func short(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Of returns the position c holds for partition p (0 if it names none).
func (c Cursor) Of(p uint64) uint64 {
	i := sort.Search(len(c), func(i int) bool { return c[i].Partition >= p })
	if i < len(c) && c[i].Partition == p {
		return c[i].LSN
	}
	return 0
}

// With returns c with partition p at lsn (c itself is not changed).
func (c Cursor) With(p, lsn uint64) Cursor {
	i := sort.Search(len(c), func(i int) bool { return c[i].Partition >= p })
	out := make(Cursor, 0, len(c)+1)
	out = append(out, c[:i]...)
	out = append(out, Pos{p, lsn})
	if i < len(c) && c[i].Partition == p {
		i++
	}
	return append(out, c[i:]...)
}

// Describe is c for people: "p0@1234 p3@17".
func (c Cursor) Describe() string {
	var b strings.Builder
	for i, p := range c {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("p" + strconv.FormatUint(p.Partition, 10) + "@" + strconv.FormatUint(p.LSN, 10))
	}
	return b.String()
}

// Set moves partition p of c to lsn, in place.
func (c *Cursor) Set(p, lsn uint64) {
	s := *c
	if n := len(s); n > 0 && s[n-1].Partition == p { // one partition, or the last: the common case
		s[n-1].LSN = lsn
		return
	}
	i := sort.Search(len(s), func(i int) bool { return s[i].Partition >= p })
	if i < len(s) && s[i].Partition == p {
		s[i].LSN = lsn
		return
	}
	s = append(s, Pos{})
	copy(s[i+1:], s[i:])
	s[i] = Pos{p, lsn}
	*c = s
}
