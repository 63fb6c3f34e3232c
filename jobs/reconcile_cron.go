package jobs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidCron: a schedule that is not five cron fields (or a macro), or
// that never fires.
var ErrInvalidCron = errors.New("invalid cron schedule")

// CronSchedule is a standard five-field cron schedule (minute hour
// day-of-month month day-of-week) evaluated in UTC. It implements
// river.PeriodicSchedule. A dozen lines of parsing is cheaper than a
// dependency: fields take *, numbers, ranges (1-5), steps (*/15, 1-30/2),
// lists (1,15) and, for months and weekdays, three-letter names (JAN, MON);
// 0 and 7 are both Sunday. As in every cron, when both day fields are
// restricted a day matching either one fires. The macros @yearly
// (@annually), @monthly, @weekly, @daily (@midnight) and @hourly are
// accepted.
type CronSchedule struct {
	spec                         string
	minute, hour, dom, month     uint64 // bit i set: value i allowed
	dow                          uint64
	domRestricted, dowRestricted bool
}

var cronMacros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

var (
	monthNames = map[string]int{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}
	dowNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
)

// ParseCron parses a cron schedule. It fails with ErrInvalidCron.
func ParseCron(spec string) (*CronSchedule, error) {
	expanded := strings.TrimSpace(spec)
	if m, ok := cronMacros[strings.ToLower(expanded)]; ok {
		expanded = m
	}
	fields := strings.Fields(expanded)
	if len(fields) != 5 {
		return nil, fmt.Errorf("%w: %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", ErrInvalidCron, spec, len(fields))
	}
	s := &CronSchedule{spec: spec}
	var err error
	parse := func(i int, name string, lo, hi int, names map[string]int) uint64 {
		if err != nil {
			return 0
		}
		var bits uint64
		bits, err = parseCronField(fields[i], lo, hi, names)
		if err != nil {
			err = fmt.Errorf("%w: %q: %s field: %w", ErrInvalidCron, spec, name, err)
		}
		return bits
	}
	s.minute = parse(0, "minute", 0, 59, nil)
	s.hour = parse(1, "hour", 0, 23, nil)
	s.dom = parse(2, "day-of-month", 1, 31, nil)
	s.month = parse(3, "month", 1, 12, monthNames)
	s.dow = parse(4, "day-of-week", 0, 7, dowNames)
	if err != nil {
		return nil, err
	}
	if s.dow&(1<<7) != 0 {
		s.dow |= 1 // 7 is Sunday too
	}
	s.domRestricted = fields[2] != "*" && !strings.HasPrefix(fields[2], "*/")
	s.dowRestricted = fields[4] != "*" && !strings.HasPrefix(fields[4], "*/")
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%w: %q never fires", ErrInvalidCron, spec)
	}
	return s, nil
}

func parseCronField(field string, lo, hi int, names map[string]int) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(field, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("bad step %q", stepText)
			}
			step = n
		}
		var from, to int
		switch {
		case rng == "*":
			from, to = lo, hi
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err error
			if from, err = cronValue(a, lo, hi, names); err != nil {
				return 0, err
			}
			if to, err = cronValue(b, lo, hi, names); err != nil {
				return 0, err
			}
			if from > to {
				return 0, fmt.Errorf("range %q runs backwards", rng)
			}
		default:
			v, err := cronValue(rng, lo, hi, names)
			if err != nil {
				return 0, err
			}
			from, to = v, v
			if hasStep {
				to = hi // 5/15 means from 5, every 15
			}
		}
		for v := from; v <= to; v += step {
			bits |= 1 << uint(v)
		}
	}
	return bits, nil
}

func cronValue(s string, lo, hi int, names map[string]int) (int, error) {
	if v, ok := names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%q is not a value from %d to %d", s, lo, hi)
	}
	return v, nil
}

// String is the schedule as written.
func (s *CronSchedule) String() string { return s.spec }

func (s *CronSchedule) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<uint(t.Day())) != 0
	dow := s.dow&(1<<uint(t.Weekday())) != 0
	if s.domRestricted && s.dowRestricted {
		return dom || dow
	}
	return dom && dow
}

// cronHorizon bounds the search for a firing time: a schedule that fires
// in no five-year window (31 February) never fires.
const cronHorizon = 5 * 366 * 24 * time.Hour

// Next returns the first firing time strictly after t (UTC, to the minute);
// the zero time if the schedule never fires. It implements
// river.PeriodicSchedule.
func (s *CronSchedule) Next(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Minute).Add(time.Minute)
	limit := t.Add(cronHorizon)
	for t.Before(limit) {
		switch {
		case s.month&(1<<uint(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !s.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		case s.hour&(1<<uint(t.Hour())) == 0:
			t = t.Truncate(time.Hour).Add(time.Hour)
		case s.minute&(1<<uint(t.Minute())) == 0:
			t = t.Add(time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}

// Prev returns the latest firing time at or before t (UTC, to the minute);
// the zero time if there is none within the horizon.
func (s *CronSchedule) Prev(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Minute)
	limit := t.Add(-cronHorizon)
	for t.After(limit) {
		switch {
		case s.month&(1<<uint(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC).Add(-time.Minute)
		case !s.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC).Add(-time.Minute)
		case s.hour&(1<<uint(t.Hour())) == 0:
			t = t.Truncate(time.Hour).Add(-time.Minute)
		case s.minute&(1<<uint(t.Minute())) == 0:
			t = t.Add(-time.Minute)
		default:
			return t
		}
	}
	return time.Time{}
}
