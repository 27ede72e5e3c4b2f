package client_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
)

// The examples talk to the server at $TENURE_ADDR, as the tenure CLI does
// (`go test` starts one), else to `tenure server` on its default address.
func serverURL() string { return cmp.Or(os.Getenv("TENURE_ADDR"), "http://127.0.0.1:7070") }

// WelcomeEmail is a typed task: its type says what kind of work it is, and
// its fields are the task's arguments, sent as JSON.
type WelcomeEmail struct {
	To       string `json:"to"`
	Template string `json:"template"`
}

// Kind names the task's kind of work: workers route it by this name.
func (WelcomeEmail) Kind() string { return "welcome_email" }

// SubmitOptions are the defaults of its submits.
func (WelcomeEmail) SubmitOptions() client.SubmitOptions {
	return client.SubmitOptions{Queue: "emails", Retry: &client.RetryPolicy{MaxAttempts: 5}}
}

// Submitting a typed task and reading it back. The request id makes the
// submit idempotent: submitting it again creates nothing.
func Example() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	email := WelcomeEmail{To: "ada@example.com", Template: "welcome"}
	res, err := c.Submit(ctx, client.SubmitRequest{Args: email, RequestID: "welcome-ada"})
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.Submit(ctx, client.SubmitRequest{Args: email, RequestID: "welcome-ada"})
	if err != nil {
		log.Fatal(err)
	}
	task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: res.TaskID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Kind, task.Queue, task.State, task.RetryPolicy.MaxAttempts, string(task.Payload))
	fmt.Println("submitted again:", again.Duplicate, again.TaskID == res.TaskID)
	// Output:
	// welcome_email emails WAITING 5 {"to":"ada@example.com","template":"welcome"}
	// submitted again: true true
}

// Typed tasks in one call, then listed: ListTasks fetches the pages as the
// loop asks for them.
func ExampleClient_SubmitBatch() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var reqs []client.SubmitRequest
	for _, to := range []string{"ada", "grace", "edsger"} {
		reqs = append(reqs, client.SubmitRequest{
			Args:      WelcomeEmail{To: to + "@example.com", Template: "newsletter-42"},
			Queue:     "newsletter", // in place of the type's default
			RequestID: "newsletter-42-" + to,
		})
	}
	if _, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: reqs}); err != nil {
		log.Fatal(err)
	}
	for t, err := range c.ListTasks(ctx, client.ListTasksRequest{Queue: "newsletter", PageSize: 2}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(t.Kind, t.State, string(t.Payload))
	}
	// Output:
	// welcome_email WAITING {"to":"ada@example.com","template":"newsletter-42"}
	// welcome_email WAITING {"to":"grace@example.com","template":"newsletter-42"}
	// welcome_email WAITING {"to":"edsger@example.com","template":"newsletter-42"}
}

// DailyDigest is the typed task a schedule submits.
type DailyDigest struct {
	List string `json:"list"`
}

func (DailyDigest) Kind() string { return "daily_digest" }

// A schedule: a typed task submitted to its queue at each tick of a cron
// expression, read in a time zone. Each tick is one record in the server's
// log: it fires once, however often the server restarts.
func ExampleClient_CreateSchedule() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.CreateSchedule(ctx, client.ScheduleRequest{
		Queue:    "digests",
		Name:     "morning",
		Cron:     "0 7 * * *",
		TimeZone: "Europe/Berlin",
		Args:     DailyDigest{List: "engineering"},
	})
	if err != nil {
		log.Fatal(err)
	}
	sc := res.Schedule
	fmt.Println(res.Created, sc.Name, sc.Kind, sc.Cron, sc.TimeZone, string(sc.Payload))
	berlin, err := time.LoadLocation(sc.TimeZone)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next fires:", len(sc.NextFires), "at", sc.NextFires[0].In(berlin).Format("15:04"), "in Berlin")
	// Output:
	// true morning daily_digest 0 7 * * * Europe/Berlin {"list":"engineering"}
	// next fires: 5 at 07:00 in Berlin
}

// Flow control: at most 4 leases of the queue live at once, across every
// worker, granted at most 2 per second. The limits are records in the
// server's log, kept across restarts.
func ExampleClient_SetQueueLimits() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	concurrency, rate := uint32(4), 2.0
	res, err := c.SetQueueLimits(ctx, client.SetQueueLimitsRequest{
		Queue:          "warehouse-sync",
		MaxConcurrency: &concurrency,
		Rate:           &rate,
		Reason:         "the warehouse API allows 2 calls a second",
	})
	if err != nil {
		log.Fatal(err)
	}
	l := res.Queue.Limits
	fmt.Println(res.Changed, l.MaxConcurrency, l.Rate, l.Burst, l.Reason)
	// Output:
	// true 4 2 2 the warehouse API allows 2 calls a second
}

// An operator kills a task, then retries it: each call answers the task,
// and each is a record in its history, with who asked and why.
func ExampleClient_KillTask() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{RequestedBy: "ops@example.com"})
	if err != nil {
		log.Fatal(err)
	}
	sub, err := c.Submit(ctx, client.SubmitRequest{Queue: "imports", Kind: "import_csv", Payload: []byte("orders.csv")})
	if err != nil {
		log.Fatal(err)
	}
	dead, err := c.KillTask(ctx, client.KillTaskRequest{TaskID: sub.TaskID, Reason: "the file is malformed"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(dead.State, dead.FailureReason)
	again, err := c.RetryTask(ctx, client.RetryTaskRequest{TaskID: sub.TaskID, Reason: "file fixed"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.State)
	history, err := c.GetTaskHistory(ctx, client.GetTaskHistoryRequest{TaskID: sub.TaskID})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range history[1:] { // after its TaskCreated
		fmt.Printf("%s by %s: %s\n", e.Type, e.RequestedBy, e.Reason)
	}
	// Output:
	// DEAD the file is malformed
	// WAITING
	// TaskDead by ops@example.com: the file is malformed
	// TaskRetried by ops@example.com: file fixed
}

// An interceptor runs around every call: here it names the caller in a
// header and counts the calls.
func ExampleInterceptor() {
	ctx := context.Background()
	var calls []string
	count := func(ctx context.Context, call *client.Call, next func(context.Context) error) error {
		call.Header.Set("X-Caller", "billing-service")
		err := next(ctx)
		calls = append(calls, fmt.Sprintf("%s, not found: %v", call.Op, errors.Is(err, client.ErrNotFound)))
		return err
	}
	c, err := client.New(serverURL(), client.Options{Interceptors: []client.Interceptor{count}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Submit(ctx, client.SubmitRequest{Queue: "intercepted"}); err != nil {
		log.Fatal(err)
	}
	if _, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: "no-such-task"}); !errors.Is(err, client.ErrNotFound) {
		log.Fatal(err)
	}
	fmt.Println(calls)
	// Output:
	// [Submit, not found: false GetTask, not found: true]
}

// The worker protocol by hand, with the commit boundary. Package worker
// does all of this (plus heartbeats) for you.
func ExampleClient_Commit() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Submit(ctx, client.SubmitRequest{Queue: "by-hand", Payload: []byte("ada@example.com")}); err != nil {
		log.Fatal(err)
	}
	leased, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "example-1", Queue: "by-hand", Wait: 10 * time.Second})
	if err != nil || len(leased.Tasks) == 0 {
		log.Fatal("nothing leased: ", err)
	}
	lt := leased.Tasks[0]
	tok, err := c.Commit(ctx, client.CommitRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: []byte("rendered email")})
	switch {
	case errors.Is(err, client.ErrLeaseLost), errors.Is(err, client.ErrAlreadyCommitted):
		return // another attempt owns the task: apply no effect
	case err != nil:
		log.Fatal(err)
	}
	// Apply the external effect keyed by tok.TaskID, then finish.
	fmt.Println("sending the email to", string(lt.Payload), "attempt", tok.Attempt)
	if err := c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
		log.Fatal(err)
	}
	task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: lt.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, string(task.Result))
	// Output:
	// sending the email to ada@example.com attempt 1
	// COMPLETED rendered email
}

// Reading what a refusal was about.
func ExampleError() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Submit(ctx, client.SubmitRequest{Queue: "emails", Payload: make([]byte, 1<<20+1)})
	var e *client.Error
	if errors.As(err, &e) && errors.Is(err, client.ErrTooLarge) {
		fmt.Printf("%s is %d bytes; the limit is %d\n", e.Field, e.Size, e.Limit)
	}
	// Output:
	// payload is 1048577 bytes; the limit is 1048576
}
