package member

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// deliverMaxAnswer bounds what is read of a refused delivery's answer.
const deliverMaxAnswer = 4096

// deliver has a group of tasks that a record of one of this node's
// partitions created for another partition created there
// (docs/design/workflows.md, "Cluster mode"): on its coordinator if this
// node serves it, else with a POST to route.DeliverPath of the node that
// does, signed as forwarded. It returns once they are durable there.
func (m *Member) deliver(ctx context.Context, d coordinator.Delivered) error {
	id, err := partitionOf(d.Tasks[0].TaskID)
	if err != nil {
		return err
	}
	t, err := m.target(ctx, id)
	if err != nil {
		return err
	}
	if t.o != nil {
		return t.o.h.Do(func(c *coordinator.Coordinator) error { return c.CreateDelivered(ctx, d) })
	}
	body, err := coordinator.EncodeDelivered(d)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.peer.Addr()+route.DeliverPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(route.PartitionHeader, strconv.FormatUint(id, 10))
	m.SignForwarded(req.Header, route.DeliverPath, "")
	resp, err := m.cfg.HTTPClient.Do(req)
	if err != nil {
		m.afterRemote(t, coordinator.ErrUnavailable)
		return fmt.Errorf("%w: delivering %d tasks to partition %d at %s: %v", coordinator.ErrUnavailable, len(d.Tasks), id, t.peer.Addr(), err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, deliverMaxAnswer))
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusServiceUnavailable {
			m.afterRemote(t, coordinator.ErrUnavailable)
		}
		return fmt.Errorf("delivering %d tasks to partition %d at %s: %s: %s", len(d.Tasks), id, t.peer.Addr(), resp.Status, firstLine(string(answer)))
	}
	return nil
}
