package server_test

import (
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestDashboardShadowsNothing: with the dashboard and authentication on,
// GET / and /assets/ are the dashboard's, served without a token, while
// the API (Connect POST and GET), the probes, /metrics and unknown paths
// answer as without it.
func TestDashboardShadowsNothing(t *testing.T) {
	t.Parallel()
	dash := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("dashboard " + r.URL.Path))
	})
	url, hc, tok := authServerWith(t, server.Options{Dashboard: dash})

	for path, want := range map[string]string{"/": "dashboard /", "/assets/app.js": "dashboard /assets/app.js"} {
		if code, body := get(t, hc, url+path); code != http.StatusOK || body != want {
			t.Errorf("GET %s: %d %q, want the dashboard", path, code, body)
		}
	}
	checkProbes(t, hc, url, http.StatusOK, "ready", "with the dashboard")
	if code, body := get(t, hc, url+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: %d %q, want 401", code, body)
	}
	if code, body, _ := getWith(t, hc, url+"/metrics", tok.Star[auth.Reader]); code != http.StatusOK || !strings.Contains(body, "tenure_") {
		t.Errorf("GET /metrics: %d %.100q", code, body)
	}
	for _, path := range []string{"/index.html", "/nope", "/tenure.v1.NoService/NoCall"} {
		if code, body := get(t, hc, url+path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d %q, want 404", path, code, body)
		}
	}
	// A Connect GET of a read without side effects, and a POST.
	tasks := tenurev1connect.NewTaskServiceClient(hc, url, connect.WithHTTPGet())
	req := connect.NewRequest(&tenurev1.ListTasksRequest{})
	req.Header().Set("Authorization", "Bearer "+tok.Star[auth.Reader])
	if _, err := tasks.ListTasks(apiCtx(t), req); err != nil {
		t.Errorf("ListTasks over GET: %v", err)
	}
	wreq := connect.NewRequest(&tenurev1.WhoAmIRequest{})
	wreq.Header().Set("Authorization", "Bearer "+tok.Star[auth.Reader])
	if res, err := tenurev1connect.NewAdminServiceClient(hc, url).WhoAmI(apiCtx(t), wreq); err != nil || res.Msg.GetName() != "reader-star" {
		t.Errorf("WhoAmI: %v %v", res, err)
	}
}
