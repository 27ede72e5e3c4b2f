package member_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestSchedulesAcrossNodes: a schedule lives in one partition of its
// queue, and every call about it, through whichever node, reaches that
// partition (forwarded to its owner when need be); a listing through any
// node merges every partition. A schedule's tasks are all created in its
// partition, one per tick. Bad input and unknown schedules are refused
// with their reason through any node, and a call naming an unknown queue
// creates no queue.
func TestSchedulesAcrossNodes(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx := t.Context()
	sc := func(n *testNode) tenurev1connect.ScheduleServiceClient {
		return tenurev1connect.NewScheduleServiceClient(http.DefaultClient, n.url)
	}
	const count = 8
	var names []string
	for i := range count {
		name := fmt.Sprintf("s%d", i)
		names = append(names, name)
		resp, err := sc(nodes[i%3]).CreateSchedule(ctx, connect.NewRequest(&tenurev1.CreateScheduleRequest{Queue: "sq", Name: name, Cron: "@yearly"}))
		if err != nil || !resp.Msg.GetCreated() {
			t.Fatalf("CreateSchedule %s: %v, %v", name, resp, err)
		}
	}
	spread(t, db, 3)
	for _, n := range nodes {
		eventually(t, "every schedule listed through "+n.id, func() bool {
			resp, err := sc(n).ListSchedules(ctx, connect.NewRequest(&tenurev1.ListSchedulesRequest{Queue: "sq"}))
			if err != nil {
				return false
			}
			var got []string
			for _, s := range resp.Msg.GetSchedules() {
				got = append(got, s.GetName())
			}
			return slices.Equal(got, names)
		})
		for _, name := range names {
			resp, err := sc(n).GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "sq", Name: name}))
			if err != nil || resp.Msg.GetSchedule().GetName() != name {
				t.Fatalf("GetSchedule %s through %s: %v, %v", name, n.id, resp, err)
			}
		}
	}

	// Each action through another node than the last.
	if _, err := sc(nodes[1]).PauseSchedule(ctx, connect.NewRequest(&tenurev1.PauseScheduleRequest{Queue: "sq", Name: "s0", Reason: "r"})); err != nil {
		t.Fatal(err)
	}
	if g, err := sc(nodes[2]).GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "sq", Name: "s0"})); err != nil || !g.Msg.GetSchedule().GetPaused() {
		t.Fatalf("GetSchedule after the pause through another node: %v, %v", g, err)
	}
	if r, err := sc(nodes[2]).ResumeSchedule(ctx, connect.NewRequest(&tenurev1.ResumeScheduleRequest{Queue: "sq", Name: "s0"})); err != nil || !r.Msg.GetChanged() {
		t.Fatalf("ResumeSchedule: %v, %v", r, err)
	}
	if u, err := sc(nodes[0]).UpdateSchedule(ctx, connect.NewRequest(&tenurev1.UpdateScheduleRequest{Queue: "sq", Name: "s0", Cron: "@monthly"})); err != nil ||
		u.Msg.GetSchedule().GetCron() != "@monthly" {
		t.Fatalf("UpdateSchedule: %v, %v", u, err)
	}
	if _, err := sc(nodes[1]).DeleteSchedule(ctx, connect.NewRequest(&tenurev1.DeleteScheduleRequest{Queue: "sq", Name: "s0"})); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		_, err := sc(n).GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "sq", Name: "s0"}))
		if connect.CodeOf(err) != connect.CodeNotFound || reason(err) != tenurev1.ErrorReason_ERROR_REASON_NOT_FOUND {
			t.Fatalf("GetSchedule of the deleted schedule through %s: %v", n.id, err)
		}
		_, err = sc(n).CreateSchedule(ctx, connect.NewRequest(&tenurev1.CreateScheduleRequest{Queue: "sq", Name: "s1", Cron: "@daily"}))
		if connect.CodeOf(err) != connect.CodeAlreadyExists || reason(err) != tenurev1.ErrorReason_ERROR_REASON_ALREADY_EXISTS {
			t.Fatalf("CreateSchedule of another definition through %s: %v", n.id, err)
		}
		_, err = sc(n).CreateSchedule(ctx, connect.NewRequest(&tenurev1.CreateScheduleRequest{Queue: "sq", Name: "bad", Cron: "@daily", TimeZone: "Nowhere/City"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || detail(err).GetField() != "time_zone" {
			t.Fatalf("CreateSchedule with an unknown zone through %s: %v", n.id, err)
		}
		_, err = sc(n).GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "never-made", Name: "s1"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("GetSchedule in an unknown queue through %s: %v", n.id, err)
		}
	}
	for _, a := range owners(t, db) {
		if a.Key.Queue == "never-made" {
			t.Fatal("a call about a schedule of an unknown queue created the queue")
		}
	}

	// A schedule that fires every second: its tasks all in one partition,
	// one per tick.
	if _, err := sc(nodes[2]).CreateSchedule(ctx, connect.NewRequest(&tenurev1.CreateScheduleRequest{Queue: "sq", Name: "fast", Cron: "* * * * * *",
		Overlap: tenurev1.OverlapPolicy_OVERLAP_POLICY_ALLOW})); err != nil {
		t.Fatal(err)
	}
	var fired []*tenurev1.Task
	eventually(t, "three fires", func() bool {
		fired = nil
		for token := ""; ; {
			resp, err := nodes[0].tasks.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Queue: "sq", PageSize: 1000, PageToken: token}))
			if err != nil {
				return false
			}
			fired = append(fired, resp.Msg.GetTasks()...)
			if token = resp.Msg.GetNextPageToken(); token == "" {
				return len(fired) >= 3
			}
		}
	})
	seen := map[string]bool{}
	for _, tk := range fired {
		if p := partitionOf(t, tk.GetTaskId()); p != partitionOf(t, fired[0].GetTaskId()) {
			t.Errorf("task %s of the schedule is in partition %d, another in %d", tk.GetTaskId(), p, partitionOf(t, fired[0].GetTaskId()))
		}
		if seen[tk.GetRequestId()] {
			t.Errorf("request id %q twice", tk.GetRequestId())
		}
		seen[tk.GetRequestId()] = true
	}
}
