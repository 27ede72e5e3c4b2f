package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
)

// Submitting a task and reading it back. The request id makes the submit
// idempotent: running this twice creates one task.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New("http://127.0.0.1:7070", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Submit(ctx, client.SubmitRequest{
		Queue:           "emails",
		Payload:         []byte(`{"to":"ada@example.com","template":"welcome"}`),
		RequestID:       "welcome-ada",
		ExecutionWindow: time.Minute,
		Retry:           &client.RetryPolicy{MaxAttempts: 5},
	})
	if err != nil {
		log.Fatal(err)
	}
	task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: res.TaskID})
	if errors.Is(err, client.ErrNotFound) {
		return // finished long ago and purged after the retention period
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.ID, task.State, res.Duplicate)
}

// The worker protocol by hand, with the commit boundary. Package worker
// does all of this (plus heartbeats) for you.
func ExampleClient_Commit() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:7070", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	leased, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "example-1", Queue: "emails", Wait: 10 * time.Second})
	if err != nil || len(leased) == 0 {
		return
	}
	lt := leased[0]
	result := []byte("rendered email")
	tok, err := c.Commit(ctx, client.CommitRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Result: result})
	switch {
	case errors.Is(err, client.ErrLeaseLost), errors.Is(err, client.ErrAlreadyCommitted):
		return // another attempt owns the task: apply no effect
	case err != nil:
		log.Fatal(err)
	}
	// Apply the external effect keyed by tok.TaskID, then finish.
	fmt.Println("sending email for", tok.TaskID)
	if err := c.Complete(ctx, client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
		log.Print(err)
	}
}

// Reading what a refusal was about.
func ExampleError() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:7070", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Submit(ctx, client.SubmitRequest{Queue: "emails", Payload: make([]byte, 2<<20)})
	var e *client.Error
	if errors.As(err, &e) && errors.Is(err, client.ErrTooLarge) {
		fmt.Printf("%s is %d bytes; the limit is %d\n", e.Field, e.Size, e.Limit)
	}
}
