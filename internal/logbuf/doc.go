// Package logbuf keeps, in tests, what the code under test logs, for the
// test to read back: a Buffer is the writer of a slog handler (or of a
// process's output) that goroutines write at once while the test reads.
//
//	var logs logbuf.Buffer
//	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
//	…
//	if !strings.Contains(logs.String(), "replaying the whole log") { … }
package logbuf
