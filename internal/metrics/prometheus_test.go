package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/clock"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestAlertRules: the alert rules of docs/prometheus pass `promtool check
// rules`, and their unit tests (each alert fires on the series it is
// meant for, and not on a healthy one) pass `promtool test rules`.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	if out, err := runTool(t, tool, nil, "check", "rules", repoFile(t, "docs/prometheus/alerts.yml")); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := runTool(t, tool, nil, "test", "rules", repoFile(t, "docs/prometheus/alerts_test.yml")); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestPrometheusScrapesTenure starts a real Prometheus with the monitoring
// guide's scrape config (docs/prometheus/prometheus.yml, scrape interval
// shortened) against a live tenure server, and waits until its query API
// shows tenure_tasks for the queue the test submitted to, and the alert
// rules loaded.
func TestPrometheusScrapesTenure(t *testing.T) {
	t.Parallel()
	sample, err := os.ReadFile(repoFile(t, "docs/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(repoFile(t, "docs/guides/monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(guide, sample) {
		t.Fatalf("docs/guides/monitoring.md does not quote docs/prometheus/prometheus.yml verbatim:\n%s", sample)
	}
	bin := lookTool(t, "prometheus")

	e := startEmbedded(t, t.TempDir(), clock.Real)
	if _, err := e.tasks.Submit(t.Context(), connect.NewRequest(&tenurev1.SubmitRequest{Queue: "emails", Payload: []byte("hi")})); err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(e.url, "http://")
	cfg := strings.ReplaceAll(string(sample), `"127.0.0.1:7070"`, `"`+target+`"`)
	cfg = strings.ReplaceAll(cfg, "interval: 15s", "interval: 1s")
	if !strings.Contains(cfg, target) || strings.Contains(cfg, "15s") {
		t.Fatalf("could not point the sample config at %s with a 1s interval:\n%s", target, cfg)
	}
	dir := t.TempDir()
	alerts, err := os.ReadFile(repoFile(t, "docs/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"prometheus.yml": []byte(cfg), "alerts.yml": alerts} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	addr := freeAddr(t)
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	output := func() string {
		b, _ := os.ReadFile(logFile.Name())
		return string(b)
	}
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})

	// query returns the result vector of an instant query (nil until
	// Prometheus answers).
	query := func(q string) []map[string]any {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Data   struct{ Result []map[string]any }
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil || r.Status != "success" {
			return nil
		}
		return r.Data.Result
	}
	deadline := time.Now().Add(90 * time.Second)
	var got []map[string]any
	for {
		select {
		case err := <-exited:
			t.Fatalf("prometheus exited: %v\n%s", err, output())
		default:
		}
		got = query(`tenure_tasks{job="tenure",namespace="default",queue="emails",state="WAITING"}`)
		if len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus shows no tenure_tasks for default/emails within 90s; its output:\n%s", output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := fmt.Sprint(got[0]["value"]); !strings.HasSuffix(v, " 1]") {
		t.Errorf("tenure_tasks WAITING of default/emails in Prometheus = %s, want 1", v)
	}

	// The alert rules loaded with the config.
	resp, err := http.Get("http://" + addr + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rules struct {
		Data struct {
			Groups []struct {
				Name  string
				Rules []struct{ Name, Health string }
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&rules); err != nil {
		t.Fatal(err)
	}
	want := bytes.Count(alerts, []byte("- alert: "))
	if len(rules.Data.Groups) != 1 || len(rules.Data.Groups[0].Rules) != want || want == 0 {
		t.Fatalf("prometheus loaded the rule groups %+v, want the %d rules of alerts.yml", rules.Data.Groups, want)
	}
}
