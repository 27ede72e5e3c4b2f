package coordinator

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/tenurehq/tenure/internal/state"
)

// cronParser accepts what docs/guides/schedules.md lists: 5 fields
// (minute hour day-of-month month day-of-week), 6 with seconds first, and
// the descriptors @yearly, @monthly, @weekly, @daily, @hourly and
// @every <duration>.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron is a parsed schedule expression in its time zone. Its ticks are the
// instants github.com/robfig/cron/v3 computes, which decides what happens
// across daylight-saving changes (docs/design/state-machine.md, "Schedules").
type Cron struct {
	s   cron.Schedule
	loc *time.Location
}

// ParseCron parses a schedule's expression and time zone ("" is UTC). Its
// errors are FieldErrors naming cron or time_zone.
func ParseCron(expr, tz string) (c Cron, err error) {
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return Cron{}, fieldErr("cron", "%q names a time zone: give it in time_zone instead", expr)
	}
	c.loc = time.UTC
	switch tz {
	case "", "UTC":
	case "Local":
		return Cron{}, fieldErr("time_zone", "Local means the server's own zone, which can change with the machine; give an IANA name such as Europe/Berlin or UTC")
	default:
		if c.loc, err = time.LoadLocation(tz); err != nil {
			return Cron{}, fieldErr("time_zone", "%q is not a zone of the IANA time zone database (such as Europe/Berlin, America/New_York or UTC)", tz)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fieldErr("cron", "%q does not parse: %v", expr, r)
		}
	}()
	if c.s, err = cronParser.Parse(expr); err != nil {
		return Cron{}, fieldErr("cron", "%q does not parse: %v; give 5 fields (minute hour day-of-month month day-of-week), "+
			"6 with seconds first, or one of @yearly, @monthly, @weekly, @daily, @hourly, @every <duration>", expr, err)
	}
	return c, nil
}

// Next is the first tick strictly after t, or 0 if there is none within the
// library's horizon of five years. Ticks fall on whole seconds.
func (c Cron) Next(t state.Time) state.Time {
	n := c.s.Next(time.Unix(0, int64(t)).In(c.loc))
	if n.IsZero() {
		return 0
	}
	return state.TimeOf(n)
}

// Ticks returns the first n ticks strictly after t.
func (c Cron) Ticks(t state.Time, n int) []time.Time {
	var out []time.Time
	for range n {
		if t = c.Next(t); t == 0 {
			break
		}
		out = append(out, t.Std())
	}
	return out
}

// cronOf returns the parsed expression of a schedule, cached by key until
// its definition changes. A stored expression that no longer parses (a
// time zone missing from this machine's database) is logged once per
// definition and the schedule is left undecided.
func (c *Coordinator) cronOf(sc *state.Schedule) (Cron, bool) {
	e, ok := c.crons[sc.Key]
	if ok && e.expr == sc.Def.Cron && e.tz == sc.Def.TimeZone {
		return e.cron, e.err == nil
	}
	cr, err := ParseCron(sc.Def.Cron, sc.Def.TimeZone)
	if err != nil {
		c.lg.Error("a schedule's expression does not parse here: its ticks wait until it is updated or the time zone database has its zone",
			"schedule", sc.Key.String(), "cron", sc.Def.Cron, "time_zone", sc.Def.TimeZone, "err", err)
	}
	c.crons[sc.Key] = cronEntry{expr: sc.Def.Cron, tz: sc.Def.TimeZone, cron: cr, err: err}
	return cr, err == nil
}

type cronEntry struct {
	expr, tz string
	cron     Cron
	err      error
}
