package member

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// refusalMaxAnswer bounds what is read of a node's answer that refuses
// a call of callNode.
const refusalMaxAnswer = 4096

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
	if _, err := m.callNode(ctx, t.peer, route.DeliverPath, id, "application/octet-stream", body, 0); err != nil {
		if errors.Is(err, coordinator.ErrUnavailable) {
			m.afterRemote(t, err)
		}
		return fmt.Errorf("delivering %d tasks to partition %d: %w", len(d.Tasks), id, err)
	}
	return nil
}

// callNode POSTs body to path of the node peer, about partition id,
// signed as forwarded by this node for no principal (route.DeliverPath,
// route.WherePath), and returns what the node answered with 200, of which
// it reads maxAnswer bytes at most. A call that reaches no node, or that
// the node answers 503 (it does not serve the partition now), fails
// wrapping coordinator.ErrUnavailable; another answer fails with the
// node's words.
func (m *Member) callNode(ctx context.Context, peer route.Peer, path string, id uint64, contentType string, body []byte, maxAnswer int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, peer.Addr()+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set(route.PartitionHeader, strconv.FormatUint(id, 10))
	m.SignForwarded(req.Header, path, "")
	resp, err := m.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: calling %s: %v", coordinator.ErrUnavailable, peer.Addr(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, refusalMaxAnswer))
		err := fmt.Errorf("%s answered %s: %s", peer.Addr(), resp.Status, firstLine(string(answer)))
		if resp.StatusCode == http.StatusServiceUnavailable {
			err = fmt.Errorf("%w: %v", coordinator.ErrUnavailable, err)
		}
		return nil, err
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
}
