package bench

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
)

// syntheticRun is an open-loop result of three one-minute windows, with
// the embedded node's disk figures and no server RSS.
func syntheticRun() *OpenLoopResult {
	u := func(v uint64) *uint64 { return &v }
	s := func(at float64, rss, wal uint64) Sample {
		return Sample{AtSeconds: at, RSSBytes: rss << 20, HeapLiveBytes: rss << 19, WALBytes: u(wal << 20), SnapshotBytes: u(8 << 20)}
	}
	return &OpenLoopResult{
		DurationSeconds: 180, WindowSeconds: 60,
		Start: s(0, 20, 0),
		Windows: []Window{
			{EndSeconds: 60, Latency: Latency{Count: 10, P50: 2, P99: 9}, End: s(60, 100, 64)},
			{EndSeconds: 120, Latency: Latency{Count: 10, P50: 3, P99: 40}, End: s(120, 110, 128)},
			{EndSeconds: 180.4, Latency: Latency{Count: 10, P50: 2.5, P99: 12}, End: s(180.4, 105, 64)},
		},
	}
}

// svgDoc is the part of the plot's structure the test reads.
type svgDoc struct {
	Width  string `xml:"width,attr"`
	Panels []struct {
		Texts  []string `xml:"text"`
		Series []struct {
			Name   string `xml:"data-name,attr"`
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	} `xml:"g"`
}

func TestPlot(t *testing.T) {
	var a, b bytes.Buffer
	if err := syntheticRun().WritePlot(&a, "run <1>"); err != nil {
		t.Fatal(err)
	}
	if err := syntheticRun().WritePlot(&b, "run <1>"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("the same figures gave two different plots")
	}
	var doc svgDoc
	if err := xml.Unmarshal(a.Bytes(), &doc); err != nil {
		t.Fatalf("the plot is not well-formed XML: %v\n%s", err, a.String())
	}
	if len(doc.Panels) != 3 {
		t.Fatalf("%d panels, want 3", len(doc.Panels))
	}
	want := [][]string{{"p50", "p99"}, {"RSS", "Go heap (live)"}, {"WAL", "snapshots"}}
	for i, p := range doc.Panels {
		var names []string
		for _, s := range p.Series {
			names = append(names, s.Name)
		}
		if strings.Join(names, ",") != strings.Join(want[i], ",") {
			t.Errorf("panel %d (%s) has series %v, want %v (a series without points is left out)", i, p.Texts[0], names, want[i])
		}
	}
	// Latency per window, at the windows' ends; memory and disk at the
	// start and each window's end. The x axis ends at 5 min (3.007 min
	// rounded up to a nice value), the latency axis at 50 ms: the p99 of
	// the second window (40 ms at 2 min) is at 2/5 of the width and 4/5 of
	// the height (inner width 720-64-150 = 506 from x 64, panel y 76..246).
	lat, mem := doc.Panels[0].Series, doc.Panels[1].Series
	if n := len(strings.Fields(lat[1].Points)); n != 3 {
		t.Errorf("p99 has %d points, want 3", n)
	}
	if n := len(strings.Fields(mem[0].Points)); n != 4 {
		t.Errorf("RSS has %d points, want 4", n)
	}
	if p := strings.Fields(lat[1].Points)[1]; p != "266.4,110.0" {
		t.Errorf("p99 of the second window at %s, want 266.4,110.0", p)
	}
	if !strings.Contains(a.String(), "run &lt;1&gt;") || !strings.Contains(a.String(), "time (min)") {
		t.Errorf("title or axis label missing:\n%s", a.String())
	}
	if strings.Contains(a.String(), `class="mark"`) {
		t.Errorf("a run that kept its timetable is marked as stopped")
	}

	// A run stopped for its backlog is marked where it stopped, on every
	// panel: 150s is 2.5 of 5 minutes, the middle of the axis.
	stopped := syntheticRun()
	at := 150.0
	stopped.StoppedAtSeconds = &at
	var c bytes.Buffer
	if err := stopped.WritePlot(&c, "stopped"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(c.String(), `<line class="mark" x1="317.0"`); n != 3 {
		t.Errorf("%d stop marks at x 317.0, want one per panel", n)
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tc := range [][2]float64{{0, 1}, {-3, 1}, {1, 1}, {1.1, 2}, {2.2, 2.5}, {3, 5}, {7, 10}, {40, 50}, {0.03, 0.05}, {180.4 / 60, 5}, {1000, 1000}} {
		if got := niceCeil(tc[0]); got != tc[1] {
			t.Errorf("niceCeil(%v) = %v, want %v", tc[0], got, tc[1])
		}
	}
}
