package cluster

import (
	"cmp"
	"fmt"
)

// MaxNameBytes caps node ids, namespaces and queues in the cluster tables:
// their columns are VARCHAR(255).
const MaxNameBytes = 255

// MaxPartitionsPerQueue caps a queue's partition count.
const MaxPartitionsPerQueue = 1024

// PartitionKey names one partition of one queue.
type PartitionKey struct {
	Namespace string
	Queue     string
	Partition uint32
}

// String is "namespace/queue/partition", for logs and messages.
func (k PartitionKey) String() string {
	return fmt.Sprintf("%s/%s/%d", k.Namespace, k.Queue, k.Partition)
}

// Compare orders keys by namespace, queue, then partition.
func (k PartitionKey) Compare(o PartitionKey) int {
	if c := cmp.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	if c := cmp.Compare(k.Queue, o.Queue); c != 0 {
		return c
	}
	return cmp.Compare(k.Partition, o.Partition)
}

// CheckName returns an error unless s is a usable node id, namespace or
// queue: 1 to MaxNameBytes bytes. what names the field in the error.
func CheckName(what, s string) error {
	if s == "" {
		return fmt.Errorf("cluster: %s is empty", what)
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("cluster: %s is %d bytes, over the limit of %d", what, len(s), MaxNameBytes)
	}
	return nil
}
