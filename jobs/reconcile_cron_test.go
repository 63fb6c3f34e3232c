package jobs_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/jobs"
)

func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestCronNextAndPrev(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec, at, next, prev string
	}{
		{"0 2 * * *", "2025-03-14 01:59", "2025-03-14 02:00", "2025-03-13 02:00"},
		{"0 2 * * *", "2025-03-14 02:00", "2025-03-15 02:00", "2025-03-14 02:00"},
		{"0 2 * * *", "2025-12-31 23:30", "2026-01-01 02:00", "2025-12-31 02:00"},
		{"*/15 * * * *", "2025-03-14 10:07", "2025-03-14 10:15", "2025-03-14 10:00"},
		{"5/20 * * * *", "2025-03-14 10:26", "2025-03-14 10:45", "2025-03-14 10:25"},
		{"30 9-17/4 * * mon-fri", "2025-03-14 18:00", "2025-03-17 09:30", "2025-03-14 17:30"}, // Friday evening → Monday
		{"0 0 1,15 * *", "2025-03-02 00:00", "2025-03-15 00:00", "2025-03-01 00:00"},
		{"0 0 29 feb *", "2025-03-01 00:00", "2028-02-29 00:00", "2024-02-29 00:00"},
		{"0 12 * * 7", "2025-03-14 00:00", "2025-03-16 12:00", "2025-03-09 12:00"}, // 7 is Sunday
		// Both day fields restricted: either matches (the 13th, or a Friday).
		{"0 0 13 * fri", "2025-03-10 00:00", "2025-03-13 00:00", "2025-03-07 00:00"},
		{"@daily", "2025-03-14 12:00", "2025-03-15 00:00", "2025-03-14 00:00"},
		{"@hourly", "2025-03-14 12:30", "2025-03-14 13:00", "2025-03-14 12:00"},
		{"0 0 1 JAN *", "2025-03-14 12:00", "2026-01-01 00:00", "2025-01-01 00:00"},
		{"@WEEKLY", "2025-03-14 07:00", "2025-03-16 00:00", "2025-03-09 00:00"},
		// A day field starting with * restricts nothing, step or not:
		// every other day that is a Monday, not every other day or Monday.
		{"0 0 */2 * mon", "2025-03-14 00:00", "2025-03-17 00:00", "2025-03-03 00:00"},
		// 7 is Sunday in ranges too: Friday to Sunday; Mon, Wed, Fri, Sun.
		{"0 6 * * 5-7", "2025-03-13 00:00", "2025-03-14 06:00", "2025-03-09 06:00"},
		{"0 6 * * 1-7/2", "2025-03-14 07:00", "2025-03-16 06:00", "2025-03-14 06:00"},
		{"0 6 * * 7/3", "2025-03-14 07:00", "2025-03-16 06:00", "2025-03-09 06:00"},
	}
	for _, c := range cases {
		s, err := jobs.ParseCron(c.spec)
		require.NoError(t, err, c.spec)
		require.Equal(t, utc(c.next), s.Next(utc(c.at)), "%s next after %s", c.spec, c.at)
		require.Equal(t, utc(c.prev), s.Prev(utc(c.at)), "%s latest at or before %s", c.spec, c.at)
	}
	// Seconds and the caller's time zone do not matter: the schedule is UTC.
	s, _ := jobs.ParseCron("0 2 * * *")
	paris := time.FixedZone("CET", 3600)
	require.Equal(t, utc("2025-03-14 02:00"), s.Next(time.Date(2025, 3, 14, 2, 59, 59, 0, paris)))
}

func TestCronRefusesBadSchedules(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{
		"", "0 2 * *", "0 2 * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *",
		"* * * * 8", "*/0 * * * *", "5-1 * * * *", "a * * * *", "0 0 31 2 *", "@sometimes",
		"@every 1h", "TZ=UTC", "CRON_TZ=Europe/Paris 0 2 * * *", "0 2 * * 6-8",
	} {
		_, err := jobs.ParseCron(spec)
		require.True(t, errors.Is(err, jobs.ErrInvalidCron), "%q: %v", spec, err)
	}
}

// TestCronRefusalsSayWhy: an operator reading the error of a bad
// PAYGATE_RECONCILE_AT learns which field is wrong, or what is expected.
func TestCronRefusalsSayWhy(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]string{
		"0 2 * *":     "want five fields, minute hour day-of-month month day-of-week, in UTC",
		"60 2 * * *":  "minute field: end of range (60) above maximum (59)",
		"0 24 * * *":  "hour field",
		"0 2 0 * *":   "day-of-month field",
		"0 2 * 13 *":  "month field",
		"0 2 * * 8":   "day-of-week field: end of range (8) above maximum (6): 8 (days are 0 to 7 or SUN to SAT; 0 and 7 are Sunday)",
		"0 0 31 2 *":  "never fires",
		"@every 1h":   "the schedule is always UTC, and fires at set times",
		"@sometimes":  "unrecognized descriptor: @sometimes",
		"TZ=UTC":      "the schedule is always UTC",
		"*/0 2 * * *": "minute field: step of range should be a positive number",
	} {
		_, err := jobs.ParseCron(spec)
		require.ErrorIs(t, err, jobs.ErrInvalidCron)
		require.ErrorContains(t, err, fmt.Sprintf("%q", spec), "the error quotes the schedule")
		require.ErrorContains(t, err, want, spec)
	}
}

func TestScheduledDay(t *testing.T) {
	t.Parallel()
	s, _ := jobs.ParseCron("0 2 * * *")
	for at, want := range map[string]string{
		"2025-03-14 02:00": "2025-03-13", // at the tick: yesterday
		"2025-03-14 01:59": "2025-03-13", // a scheduler a moment early
		"2025-03-14 01:30": "2025-03-12", // a restart before today's tick: the day of the last tick, already run
		"2025-03-14 23:59": "2025-03-13",
		"2025-03-15 00:00": "2025-03-13",
	} {
		require.Equal(t, want, jobs.ScheduledDay(s, utc(at)).Format(time.DateOnly), at)
	}
	args, opts := jobs.ScheduledReconcile(utc("2025-03-13 00:00"))
	require.Equal(t, jobs.ReconcileArgs{Date: "2025-03-13", Scheduled: true}, args)
	require.True(t, opts.UniqueOpts.ByArgs)
}
