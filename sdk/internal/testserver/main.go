package testserver

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// Main is a TestMain for a package whose examples talk to a tenure server:
// it starts one (Start) for the tests and examples of m, and sets
// TENURE_ADDR to its URL, where the examples read it as the tenure CLI
// does. Without a server (the SDK outside the repository and no
// TENURE_TEST_ADDR) it says why and skips the examples: the tests run.
func Main(m *testing.M) {
	flag.Parse()
	s, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "the examples need a tenure server and are skipped: %v\n", err)
		skip := "^Example"
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() != "" {
			skip = f.Value.String() + "|" + skip
		}
		if err := flag.Set("test.skip", skip); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(m.Run())
	}
	os.Setenv("TENURE_ADDR", s.URL)
	code := m.Run()
	if code != 0 && s.Logs() != "" {
		fmt.Fprintf(os.Stderr, "the tenure server's logs:\n%s", s.Logs())
	}
	s.Stop()
	os.Exit(code)
}
