package client_test

import (
	"testing"

	"github.com/tenurehq/tenure/sdk/internal/testserver"
)

// TestMain runs a tenure server for the examples (package testserver).
func TestMain(m *testing.M) { testserver.Main(m) }
