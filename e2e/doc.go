// Package e2e holds the end-to-end tests of tenure: the binary built from
// cmd/tenure, run as real processes (servers, cluster nodes on MariaDB and
// Galera, exec workers, the CLI) and driven over HTTP/JSON, gRPC, the SDK,
// a browser (the dashboard) and bash (the commands README.md and
// docs/guides show). Processes are killed with -9, frozen, cut off from
// their database and restarted, and what they acknowledged is checked
// after.
//
// TestMain builds the binary once. proc_test.go starts it (every server and
// node goes through startProc), and every wait polls with
// internal/eventually, whose deadline only ends a hung test. The tests of
// the CLI's commands themselves run in-process in cmd/tenure, against
// internal/apitest.
//
//	go test ./e2e                       # all of them
//	go test ./e2e -run TestCluster -v   # cluster mode (needs MariaDB)
//	go test -short ./e2e                # without the long cluster runs
//
// docs/guides/testing.md says which need what (MariaDB, Galera, Chromium,
// promtool, grpcurl).
package e2e
