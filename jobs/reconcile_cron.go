package jobs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrInvalidCron: a schedule that is not five cron fields (or a macro), or
// that never fires.
var ErrInvalidCron = errors.New("invalid cron schedule")

// CronSchedule is a standard five-field cron schedule (minute hour
// day-of-month month day-of-week) evaluated in UTC, parsed by
// github.com/robfig/cron/v3, the parser River's documentation uses for
// periodic jobs. It implements river.PeriodicSchedule. Fields take *,
// numbers, ranges (1-5), steps (*/15, 1-30/2), lists (1,15) and, for
// months and weekdays, three-letter names (JAN, MON); 0 and 7 are both
// Sunday. As in Vixie cron, when both day fields are restricted a day
// matching either one fires, and a day field starting with * (*/2) does
// not restrict. The macros @yearly (@annually), @monthly, @weekly, @daily
// (@midnight) and @hourly are accepted, in any case.
type CronSchedule struct {
	spec     string
	schedule *cron.SpecSchedule
}

// cronParser parses schedules; cronFields parse each field alone when a
// schedule is refused, to name the field at fault.
var (
	cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	cronFields = []struct {
		name, hint string
		parser     cron.Parser
	}{
		{"minute", "", cron.NewParser(cron.Minute)},
		{"hour", "", cron.NewParser(cron.Hour)},
		{"day-of-month", "", cron.NewParser(cron.Dom)},
		{"month", "", cron.NewParser(cron.Month)},
		{"day-of-week", " (days are 0 to 7 or SUN to SAT; 0 and 7 are Sunday)", cron.NewParser(cron.Dow)},
	}
)

// cronStarBit is robfig/cron's mark of a field written with *, which
// makes a day field unrestricted; it marks */n only when n is 1.
const cronStarBit = 1 << 63

// cronSyntax is what a refusal reminds the operator of.
const cronSyntax = "want five fields, minute hour day-of-month month day-of-week, in UTC, " +
	"or one of @yearly, @monthly, @weekly, @daily, @hourly"

// ParseCron parses a cron schedule. It fails with ErrInvalidCron.
func ParseCron(spec string) (*CronSchedule, error) {
	expanded := strings.TrimSpace(spec)
	if strings.HasPrefix(expanded, "@") {
		expanded = strings.ToLower(expanded)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %q: %s", ErrInvalidCron, spec, fmt.Sprintf(format, args...))
	}
	if strings.HasPrefix(expanded, "TZ=") || strings.HasPrefix(expanded, "CRON_TZ=") || strings.HasPrefix(expanded, "@every") {
		return nil, invalid("%s (the schedule is always UTC, and fires at set times)", cronSyntax)
	}
	fields := strings.Fields(expanded)
	if !strings.HasPrefix(expanded, "@") {
		if len(fields) != 5 {
			return nil, invalid("%s; got %d fields", cronSyntax, len(fields))
		}
		fields[4] = sevenAsZero(fields[4])
		expanded = strings.Join(fields, " ")
	}
	parsed, err := cronParser.Parse(expanded)
	if err != nil {
		if len(fields) == 5 {
			for i, f := range cronFields {
				if _, ferr := f.parser.Parse(fields[i]); ferr != nil {
					return nil, invalid("%s field: %v%s", f.name, ferr, f.hint)
				}
			}
		}
		return nil, invalid("%v (%s)", err, cronSyntax)
	}
	sched := parsed.(*cron.SpecSchedule) // @every, the one other kind, is refused above
	sched.Location = time.UTC
	if len(fields) == 5 {
		// Vixie cron reads a day field starting with * as unrestricted,
		// step or not; robfig/cron only without a step.
		if strings.HasPrefix(fields[2], "*") {
			sched.Dom |= cronStarBit
		}
		if strings.HasPrefix(fields[4], "*") {
			sched.Dow |= cronStarBit
		}
	}
	s := &CronSchedule{spec: spec, schedule: sched}
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, invalid("never fires")
	}
	return s, nil
}

// sevenAsZero rewrites a day-of-week field's 7 (Sunday, as cron has
// always read it too) as 0, the only Sunday robfig/cron takes: 7 alone or
// 7/n is 0, and a range a-7[/n] is a-6[/n] plus 0 when its steps land on
// 7. Anything it cannot read is left for the parser to refuse.
func sevenAsZero(field string) string {
	parts := strings.Split(field, ",")
	for i, part := range parts {
		rng, stepText, hasStep := strings.Cut(part, "/")
		from, to, isRange := strings.Cut(rng, "-")
		switch {
		case !isRange && from == "7":
			parts[i] = "0"
		case isRange && to == "7":
			start, ok := weekday(from)
			step := 1
			if hasStep {
				n, err := strconv.Atoi(stepText)
				if err != nil || n < 1 {
					ok = false
				}
				step = n
			}
			if !ok {
				continue
			}
			var rewritten []string
			if start <= 6 {
				r := fmt.Sprintf("%d-6", start)
				if hasStep {
					r += "/" + stepText
				}
				rewritten = append(rewritten, r)
			}
			if (7-start)%step == 0 {
				rewritten = append(rewritten, "0")
			}
			parts[i] = strings.Join(rewritten, ",")
		}
	}
	return strings.Join(parts, ",")
}

// weekday reads a day-of-week value from 0 to 7, or a name.
func weekday(s string) (int, bool) {
	names := map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
	if v, ok := names[strings.ToLower(s)]; ok {
		return v, true
	}
	v, err := strconv.Atoi(s)
	return v, err == nil && v >= 0 && v <= 7
}

// String is the schedule as written.
func (s *CronSchedule) String() string { return s.spec }

// cronHorizon bounds the search for a firing time: a schedule that fires
// in no five-year window (31 February) never fires.
const cronHorizon = 5 * 366 * 24 * time.Hour

// Next returns the first firing time strictly after t (UTC, to the minute);
// the zero time if the schedule never fires. It implements
// river.PeriodicSchedule.
func (s *CronSchedule) Next(t time.Time) time.Time {
	return s.schedule.Next(t.UTC())
}

// Prev returns the latest firing time at or before t (UTC, to the minute);
// the zero time if there is none within the horizon. The library only
// looks forward: Prev looks for the first firing after t − w for windows w
// doubling from an hour, then walks forward to the last one not after t.
func (s *CronSchedule) Prev(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Minute)
	for window := time.Hour; window < 2*cronHorizon; window *= 2 {
		fired := s.Next(t.Add(-window))
		if fired.IsZero() || fired.After(t) {
			continue
		}
		for {
			next := s.Next(fired)
			if next.IsZero() || next.After(t) {
				return fired
			}
			fired = next
		}
	}
	return time.Time{}
}
