package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// where answers a route.WhereRequest for partition p, which this node
// serves, from its coordinator, confirmed as its current owner's: the
// look-up of an event stream's workflow filter on another node
// (docs/design/events.md, "Filters").
func (s *Server) where(ctx context.Context, p route.Partition, body io.Reader) ([]byte, error) {
	var req route.WhereRequest
	if err := json.NewDecoder(body).Decode(&req); err != nil {
		return nil, &coordinator.FieldError{Field: "body", Problem: "not a WhereRequest in JSON: " + err.Error()}
	}
	if len(req.TaskIDs) > route.WhereMaxTasks {
		return nil, &coordinator.FieldError{Field: "task_ids", Problem: fmt.Sprintf("%d tasks, over the limit of %d a request", len(req.TaskIDs), route.WhereMaxTasks)}
	}
	var ans route.WhereAnswer
	err := p.Do(ctx, true, func(c *coordinator.Coordinator) error {
		ans.Tasks = ans.Tasks[:0]
		return c.Where(req.TaskIDs, func(i int, namespace, queue, workflow string) {
			ans.Tasks = append(ans.Tasks, route.WhereTask{Index: i, Namespace: namespace, Queue: queue, Workflow: workflow})
		})
	}, notServedHere(p))
	if err != nil {
		return nil, err
	}
	return json.Marshal(ans)
}
