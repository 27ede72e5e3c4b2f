package principal_test

import (
	"context"
	"testing"

	"github.com/tenurehq/tenure/internal/principal"
)

func TestWithFrom(t *testing.T) {
	if got := principal.From(context.Background()); got != "" {
		t.Fatalf("From(background) = %q, want empty", got)
	}
	ctx := principal.With(context.Background(), "ops-token")
	if got := principal.From(ctx); got != "ops-token" {
		t.Fatalf("From = %q, want ops-token", got)
	}
	if got := principal.From(principal.With(ctx, "other")); got != "other" {
		t.Fatalf("inner With does not win: %q", got)
	}
}
