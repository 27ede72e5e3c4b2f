package server

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestProbedServices: every service of the tenure.v1 proto package is
// answered for by the gRPC health service and listed by reflection.
func TestProbedServices(t *testing.T) {
	var services []string
	protoregistry.GlobalFiles.RangeFilesByPackage("tenure.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			services = append(services, string(f.Services().Get(i).FullName()))
		}
		return true
	})
	if len(services) < 6 {
		t.Fatalf("found %d services of tenure.v1: %v", len(services), services)
	}
	for _, s := range services {
		if !slices.Contains(healthServices, s) || !slices.Contains(reflectedServices, s) {
			t.Errorf("service %s is not in tenureServices: the health service does not answer for it, or reflection does not list it", s)
		}
	}
}
