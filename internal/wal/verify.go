package wal

import (
	"errors"
	"fmt"
	"io/fs"
)

// SegmentReport describes one segment file.
type SegmentReport struct {
	Path     string
	FirstLSN uint64
	LastLSN  uint64 // FirstLSN-1 if the segment holds no record
	Bytes    int64
}

// VerifyReport is what Verify found.
type VerifyReport struct {
	Segments []SegmentReport
	// FirstLSN and LastLSN bound the valid records (LastLSN = FirstLSN-1
	// when there are none; both 0 without segments).
	FirstLSN, LastLSN uint64
	Records           uint64
	// Notes list what Open would repair without losing acknowledged data
	// (a torn write at the tail, leftovers of an interrupted segment
	// creation), each naming the file and offset, and a log without a
	// tail file.
	Notes []string
	// Missing is what the log lacks of the records its tail file says it
	// held durably (nil if nothing): Open would refuse appends until the
	// loss is accepted.
	Missing *Missing
}

// Verify checks every segment in opts.Dir, as Open would, without
// modifying anything: headers, every frame's length, checksum and LSN, the
// LSN sequence across segments, and that the log reaches what its tail
// file says it held (VerifyReport.Missing). check, if not nil, is called with every
// valid record (to decode its payload, say); an error from it is reported as
// corruption of that record. Damage is returned as a *CorruptionError naming
// the segment and offset of the first problem. Only opts.Dir, opts.FS and
// opts.MaxRecordBytes are used.
func Verify(opts Options, check func(lsn uint64, e Entry) error) (*VerifyReport, error) {
	rep, _, err := verifyDir(opts.withDefaults(), check)
	return rep, err
}

// ReplayDir replays the valid records of the log in opts.Dir from LSN from
// on, read-only: it verifies the segments first (Verify), then calls fn for
// each record up to the last valid one. It returns ErrCompacted if from is
// below the first LSN on disk. It must not run while a Log has the
// directory open for writing, unless the caller accepts seeing a torn tail
// that the writer is still completing as the end of the log.
func ReplayDir(opts Options, from uint64, fn func(lsn uint64, e Entry) error) (*VerifyReport, error) {
	opts = opts.withDefaults()
	rep, segs, err := verifyDir(opts, nil)
	if err != nil {
		return rep, err
	}
	from = max(from, 1)
	if len(segs) == 0 {
		return rep, nil
	}
	if from < rep.FirstLSN {
		return rep, fmt.Errorf("%w: replay from lsn %d, but the log starts at lsn %d", ErrCompacted, from, rep.FirstLSN)
	}
	r := replayer{fs: opts.FS, maxRecordBytes: opts.MaxRecordBytes}
	return rep, r.replay(segs, from, rep.LastLSN, fn)
}

// verifyDir is Verify; it also returns the segments that hold records.
func verifyDir(opts Options, check func(lsn uint64, e Entry) error) (*VerifyReport, []segmentInfo, error) {
	rep := &VerifyReport{}
	names, err := opts.FS.ReadDirNames(opts.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return rep, nil, fmt.Errorf("wal: no log at %s: %w", opts.Dir, err)
	}
	if err != nil {
		return rep, nil, fmt.Errorf("wal: read directory %s: %w", opts.Dir, err)
	}
	segs, leftovers, err := listSegments(opts.Dir, names)
	if err != nil {
		return rep, nil, err
	}
	mark, err := readTail(opts.FS, opts.Dir)
	if err != nil {
		return rep, nil, err
	}
	for _, path := range leftovers {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: leftover of an interrupted segment creation or tail file write (Open removes it)", path))
	}
	if mark == nil && len(segs) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: no tail file (a log written before it existed, or it was deleted): the end of the log cannot be checked; the next start writes one",
			opts.Dir))
	}
	var torn *scanResult
	sc := scanner{fs: opts.FS, maxRecordBytes: opts.MaxRecordBytes, check: check}
	for i, seg := range segs {
		last := i == len(segs)-1
		if i > 0 && seg.first != rep.LastLSN+1 {
			return rep, nil, gapError(seg, rep.LastLSN+1)
		}
		res, err := sc.scan(seg, last)
		if err != nil {
			return rep, nil, err
		}
		if res.shortHeader {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: last segment is %d bytes, shorter than its header; it never held a record (Open removes it)", seg.path, res.size))
			segs = segs[:i]
			if i == 0 {
				rep.FirstLSN, rep.LastLSN = seg.first, seg.first-1
			}
			break
		}
		if res.tornAt >= 0 {
			torn = &res
		}
		if i == 0 {
			rep.FirstLSN = seg.first
		}
		rep.LastLSN = res.lastLSN
		rep.Records += res.lastLSN + 1 - seg.first
		rep.Segments = append(rep.Segments, SegmentReport{Path: seg.path, FirstLSN: seg.first, LastLSN: res.lastLSN, Bytes: res.size})
	}
	rep.Missing = missingFrom(opts.Dir, mark, segs, rep.LastLSN, torn, lastPath(segs))
	if torn != nil && rep.Missing == nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: torn write at offset %d (%s, %d bytes after the last valid record at lsn %d); Open truncates it",
			lastPath(segs), torn.tornAt, torn.tornReason, torn.size-torn.tornAt, torn.lastLSN))
	}
	return rep, segs, nil
}
