package main

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
)

// minMemoryBudget is the smallest --max-memory-bytes: room for a few
// batches of the largest payloads.
const minMemoryBudget = 64 << 20

// fallbackMemoryBudget is the budget when the machine's memory cannot be
// read (not Linux).
const fallbackMemoryBudget = 1 << 30

// memoryBudget returns the node's memory budget (docs/guides/limits.md,
// "The memory budget"): --max-memory-bytes, or by default half of the
// memory the process may use (its cgroup's limit, or the machine's) less
// 256 MiB, so that even a small machine keeps room for the server's own
// working memory (softMemoryLimit) and the system: on 1 GiB, a budget of
// 256 MiB and a soft limit of 640 MiB. It sets Go's soft memory limit to
// softMemoryLimit, unless GOMEMLIMIT is set, so that the collector works
// harder as the heap nears it instead of letting it double.
func memoryBudget(lim limitFlags, snaps host.Schedule, lg *slog.Logger) (*coordinator.MemoryBudget, error) {
	budget, from := lim.maxMemoryBytes, "--max-memory-bytes"
	if budget == 0 {
		budget, from = defaultMemoryBudget()
	}
	if budget < minMemoryBudget {
		return nil, usageError{fmt.Sprintf("--max-memory-bytes %d is under %d (64 MiB); pass 0 for the default (half of the machine's memory less 256 MiB)", budget, minMemoryBudget)}
	}
	soft := softMemoryLimit(budget, lim)
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		lg.Info("memory budget", "bytes", budget, "from", from, "go_memory_limit", "GOMEMLIMIT="+v)
	} else {
		debug.SetMemoryLimit(soft)
		lg.Info("memory budget", "bytes", budget, "from", from, "go_memory_limit", soft)
	}
	return coordinator.NewMemoryBudget(budget, snaps.PurgeInterval()), nil
}

// defaultMemoryBudget is the budget without --max-memory-bytes, and what
// it is.
func defaultMemoryBudget() (int64, string) {
	if avail, what := availableMemory(); avail > 0 {
		return max(avail/2-256<<20, minMemoryBudget), "half of " + what + " less 256 MiB"
	}
	return fallbackMemoryBudget, "the default (the machine's memory is unknown)"
}

// softMemoryLimit is Go's soft memory limit for a budget: the budget, a
// quarter more for what the account leaves out (the slab's and indexes'
// room for the most tasks held, completions' results past the budget, a
// snapshot's copy of the tasks' fixed parts), four times the request
// bodies being read at once (a body's read buffer, which may grow to twice
// its size, its decoded copy and its record's encoding for the log), and
// 64 MiB for the runtime, connections and answers.
func softMemoryLimit(budget int64, lim limitFlags) int64 {
	return budget + budget/4 + 4*lim.load.WithDefaults().MaxInflightBodyBytes + 64<<20
}

// availableMemory is the memory the process may use: its cgroup's limit
// if it has one below the machine's memory, else the machine's memory
// (Linux); 0 if neither can be read.
func availableMemory() (int64, string) {
	total := memTotal()
	if limit := cgroupLimit(); limit > 0 && (total == 0 || limit < total) {
		return limit, fmt.Sprintf("the cgroup's memory limit (%d bytes)", limit)
	}
	if total > 0 {
		return total, fmt.Sprintf("the machine's memory (%d bytes)", total)
	}
	return 0, ""
}

// memTotal is MemTotal of /proc/meminfo in bytes, or 0.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupLimit is the memory limit of the process's cgroup (v2
// memory.max, or v1 memory.limit_in_bytes), or 0 for none.
func cgroupLimit() int64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	return cgroupLimitIn("/sys/fs/cgroup", b)
}

// cgroupLimitIn is cgroupLimit with the cgroup file systems mounted at
// root and procCgroup the content of /proc/self/cgroup.
func cgroupLimitIn(root string, procCgroup []byte) int64 {
	// Each line is "id:controllers:path": v2 has the one line "0::path", v1
	// a line per hierarchy, "memory" among the controllers of one.
	for line := range strings.Lines(string(procCgroup)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var n int64
		switch {
		case parts[0] == "0" && parts[1] == "":
			n = readLimit(filepath.Join(root, parts[2], "memory.max"))
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			n = readLimit(filepath.Join(root, "memory", parts[2], "memory.limit_in_bytes"))
		}
		if n > 0 {
			return n
		}
	}
	return 0
}

// readLimit reads a cgroup memory limit file: a number of bytes, or "max"
// (none, as is a v1 limit near the largest int64).
func readLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0
	}
	return n
}
