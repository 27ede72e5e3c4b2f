package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// The plot's geometry, in SVG user units (pixels).
const (
	plotWidth   = 720
	panelHeight = 170
	panelGap    = 44
	plotTop     = 76
	marginLeft  = 64
	marginRight = 150 // the legend
	plotBottom  = 40
)

// plotColors are the series' colors, in order within a panel.
var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}

// point is one value of a series at x.
type point struct{ x, y float64 }

// plotSeries is one line of a panel.
type plotSeries struct {
	name string
	pts  []point
}

// panel is one chart of the plot, sharing the x axis with the others.
type panel struct {
	title  string
	series []plotSeries
}

// WritePlot writes the open-loop figures as an SVG image of three panels
// over the run's time: the latency from due to acknowledged completion
// (p50 and p99 of each window, at the window's end), the memory (resident
// and live Go heap, and a remote server's resident memory where known),
// and the disk (WAL and snapshots). The same figures give the same bytes.
func (o *OpenLoopResult) WritePlot(w io.Writer, title string) error {
	unit, scale := "s", 1.0
	if o.DurationSeconds >= 120 {
		unit, scale = "min", 1.0/60
	}
	samples := []Sample{o.Start}
	var p50, p99 []point
	for _, win := range o.Windows {
		samples = append(samples, win.End)
		if win.Latency.Count > 0 {
			p50 = append(p50, point{win.EndSeconds * scale, win.Latency.P50})
			p99 = append(p99, point{win.EndSeconds * scale, win.Latency.P99})
		}
	}
	mem := []plotSeries{
		sampleSeries("RSS", samples, scale, func(s Sample) *uint64 { return &s.RSSBytes }),
		sampleSeries("Go heap (live)", samples, scale, func(s Sample) *uint64 { return &s.HeapLiveBytes }),
		sampleSeries("server RSS", samples, scale, func(s Sample) *uint64 { return s.ServerRSSBytes }),
	}
	disk := []plotSeries{
		sampleSeries("WAL", samples, scale, func(s Sample) *uint64 { return s.WALBytes }),
		sampleSeries("snapshots", samples, scale, func(s Sample) *uint64 { return s.SnapshotBytes }),
	}
	panels := []panel{
		{"latency, due → acknowledged completion (ms)", []plotSeries{{"p50", p50}, {"p99", p99}}},
		{"memory (MiB)", mem},
		{"disk (MiB)", disk},
	}
	// The axis covers the timetable, or the whole run if its drain was
	// long (more than 2% of it).
	xMax := o.DurationSeconds * scale
	if last := samples[len(samples)-1].AtSeconds * scale; last > xMax*1.02 {
		xMax = last
	}
	var marks []mark
	if o.StoppedAtSeconds != nil {
		marks = append(marks, mark{*o.StoppedAtSeconds * scale, "timetable stopped: backlog"})
	}
	return writeSVG(w, title, fmt.Sprintf("time (%s)", unit), xMax, panels, marks)
}

// PlotTitle is the title of an open-loop run's plot: its rate, duration
// and target; its retention; its tasks and where it stopped if it did.
func (r *Result) PlotTitle() string {
	c, o := r.Config, r.OpenLoop
	title := fmt.Sprintf("tenure bench: %g tasks/s for %gs, %s, fsync %s\n", o.RatePerSec, o.DurationSeconds, c.Target, c.fsyncLabel())
	if c.RetentionSeconds != nil {
		title += fmt.Sprintf("retention %gs, a snapshot every %gs or %d records\n", *c.RetentionSeconds, *c.SnapshotEverySeconds, *c.SnapshotEveryRecords)
	}
	title += fmt.Sprintf("%d tasks due, %d completed", o.Due, r.Completed)
	if o.StoppedAtSeconds != nil {
		title += fmt.Sprintf("; timetable stopped at %gs (backlog over %d tasks)", *o.StoppedAtSeconds, o.MaxBacklog)
	}
	return title
}

// mark is a dashed vertical line across every panel at x, labelled.
type mark struct {
	x     float64
	label string
}

// sampleSeries is the series of get's values over samples, in MiB, at
// their times; samples without the value are left out.
func sampleSeries(name string, samples []Sample, scale float64, get func(Sample) *uint64) plotSeries {
	s := plotSeries{name: name}
	for _, smp := range samples {
		if v := get(smp); v != nil {
			s.pts = append(s.pts, point{smp.AtSeconds * scale, float64(*v) / (1 << 20)})
		}
	}
	return s
}

// writeSVG draws panels, under the title (its first line bold, at most
// two more), one above the other on a shared x axis from 0 to
// xMax, with marks across them. Each panel's y axis starts at 0 and ends
// at a round value above its largest point. Series without points are
// left out of the panel and its legend.
func writeSVG(w io.Writer, title, xLabel string, xMax float64, panels []panel, marks []mark) error {
	var b strings.Builder
	height := plotTop + len(panels)*(panelHeight+panelGap) - panelGap + plotBottom
	innerW := float64(plotWidth - marginLeft - marginRight)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		plotWidth, height, plotWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotWidth, height)
	for i, line := range strings.Split(title, "\n") {
		if i == 0 {
			fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", marginLeft, html.EscapeString(line))
			continue
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", marginLeft, 20+13*i, html.EscapeString(line))
	}
	xTop := niceCeil(xMax)
	xOf := func(x float64) float64 { return marginLeft + x/xTop*innerW }
	for i, p := range panels {
		top := float64(plotTop + i*(panelHeight+panelGap))
		bottom := top + panelHeight
		yMax := 0.0
		for _, s := range p.series {
			for _, pt := range s.pts {
				yMax = max(yMax, pt.y)
			}
		}
		yTop := niceCeil(yMax)
		yOf := func(y float64) float64 { return bottom - y/yTop*panelHeight }
		fmt.Fprintf(&b, `<g class="panel">`+"\n")
		fmt.Fprintf(&b, `<text x="%d" y="%s" font-weight="bold">%s</text>`+"\n", marginLeft, num(top-6), html.EscapeString(p.title))
		for _, t := range ticks(yTop) {
			y := yOf(t)
			fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#ddd"/>`+"\n", marginLeft, num(y), num(marginLeft+innerW), num(y))
			fmt.Fprintf(&b, `<text x="%d" y="%s" text-anchor="end">%s</text>`+"\n", marginLeft-4, num(y+4), label(t))
		}
		for _, t := range ticks(xTop) {
			x := xOf(t)
			fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#eee"/>`+"\n", num(x), num(top), num(x), num(bottom))
			fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(x), num(bottom+14), label(t))
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%s" width="%s" height="%d" fill="none" stroke="#444"/>`+"\n", marginLeft, num(top), num(innerW), panelHeight)
		for _, m := range marks {
			x := xOf(m.x)
			fmt.Fprintf(&b, `<line class="mark" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e377c2" stroke-dasharray="4 3"/>`+"\n", num(x), num(top), num(x), num(bottom))
			fmt.Fprintf(&b, `<text x="%s" y="%s" fill="#e377c2">%s</text>`+"\n", num(x+3), num(top+11), html.EscapeString(m.label))
		}
		legend := 0
		for _, s := range p.series {
			if len(s.pts) == 0 {
				continue
			}
			color := plotColors[legend%len(plotColors)]
			pts := make([]string, len(s.pts))
			for j, pt := range s.pts {
				pts[j] = num(xOf(pt.x)) + "," + num(yOf(pt.y))
			}
			fmt.Fprintf(&b, `<polyline class="series" data-name="%s" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n",
				html.EscapeString(s.name), color, strings.Join(pts, " "))
			for _, pt := range s.pts {
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2" fill="%s"/>`+"\n", num(xOf(pt.x)), num(yOf(pt.y)), color)
			}
			ly := top + 12 + float64(legend)*16
			lx := marginLeft + innerW + 10
			fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"/>`+"\n", num(lx), num(ly-4), num(lx+16), num(ly-4), color)
			fmt.Fprintf(&b, `<text x="%s" y="%s">%s</text>`+"\n", num(lx+20), num(ly), html.EscapeString(s.name))
			legend++
		}
		b.WriteString("</g>\n")
	}
	fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", num(marginLeft+innerW/2), height-8, html.EscapeString(xLabel))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil is the smallest of 1, 2, 2.5 or 5 times a power of ten that is
// at least v (1 for v ≤ 0, so that an empty axis still has a scale).
func niceCeil(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// ticks are the five gridline values 0, top/4, …, top.
func ticks(top float64) []float64 {
	t := make([]float64, 5)
	for i := range t {
		t[i] = top * float64(i) / 4
	}
	return t
}

// num formats a coordinate with one decimal.
func num(v float64) string { return fmt.Sprintf("%.1f", v) }

// label formats an axis value with no more digits than it needs.
func label(v float64) string { return fmt.Sprintf("%g", math.Round(v*1000)/1000) }
