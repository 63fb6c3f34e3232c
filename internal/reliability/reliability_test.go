package reliability_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/reliability"
)

// The suite runs short inside `make test` (a few dozen payments, one or two
// faults per scenario) and long in `make reliability`
// (PAYGATE_RELIABILITY=long: hundreds of payments, several kills, every kind
// of database fault). PAYGATE_RELIABILITY_SEED replays a run.
var (
	long    = os.Getenv("PAYGATE_RELIABILITY") == "long"
	seed, _ = strconv.ParseInt(os.Getenv("PAYGATE_RELIABILITY_SEED"), 10, 64)

	reportsMu sync.Mutex
	reports   []*reliability.Report
)

// recoveryTarget is the promise: every acknowledged event is applied within
// a minute of the gateway's restart. A job cut off by SIGKILL stays
// "running" until the leader's rescuer, which River runs every 30 seconds,
// finds it older than jobs.Config.RescueStuckJobsAfter (15s): about 45s in
// the worst case.
const recoveryTarget = 60 * time.Second

func requireRecovery(t *testing.T, r *reliability.Report) {
	t.Helper()
	require.LessOrEqual(t, r.MaxRecovery, recoveryTarget, "every acknowledged event applied within a minute of the restart")
}

func TestMain(m *testing.M) {
	if n := reliability.SweepClusters(); n > 0 {
		fmt.Fprintf(os.Stderr, "reliability: stopped %d private clusters left by an earlier, killed run\n", n)
	}
	code := m.Run()
	reliability.RemoveBuild()

	if len(reports) > 0 {
		var b strings.Builder
		reliability.PrintTable(&b, reports)
		b.WriteString("\n")
		for _, r := range reports {
			r.Describe(&b)
		}
		fmt.Print("\n" + b.String())
		if path := os.Getenv("PAYGATE_RELIABILITY_REPORT"); path != "" {
			_ = os.WriteFile(path, []byte(b.String()), 0o644)
		}
	}
	// The log scan runs after every scenario: no gateway process of the
	// whole suite may have logged a secret, a token, a signature or a
	// payload.
	if leaks := reliability.ScanLogs(reliability.AllLogs.String()); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "reliability: %d forbidden strings in gateway logs:\n", len(leaks))
		for i, l := range leaks {
			if i == 20 {
				break
			}
			fmt.Fprintf(os.Stderr, "  %s\n", l)
		}
		code = 1
	} else if code == 0 {
		fmt.Printf("log scan: %d bytes of gateway logs, no secret, token, signature or payload\n", len(reliability.AllLogs.String()))
	}
	os.Exit(code)
}

func record(r *reliability.Report) {
	reportsMu.Lock()
	defer reportsMu.Unlock()
	reports = append(reports, r)
}

func pick[T any](short, full T) T {
	if long {
		return full
	}
	return short
}

// requireClean asserts the total-queue verdict: every event acknowledged,
// nothing lost, nothing applied twice, the books equal to the model's.
func requireClean(t *testing.T, res *reliability.Result) {
	t.Helper()
	r := res.Report
	record(r)
	var b strings.Builder
	r.Describe(&b)
	t.Log(b.String())
	require.Equal(t, r.Attempted, r.Acknowledged, "every event is acknowledged in the end")
	require.Zero(t, r.Lost, "lost")
	require.Zero(t, r.Duplicated, "duplicated effects")
	require.Zero(t, r.Unexpected, "events nobody sent")
	require.Zero(t, r.PaymentsDiffering, "payments differing from the model")
	require.Zero(t, r.TransactionsDiffering, "ledger lines differing from the model")
	require.Zero(t, r.Unbalanced, "unbalanced currencies")
	require.Zero(t, r.PoisonLeaks, "effects of poison events")
	require.True(t, r.OK())
}

// TestCrash: the real binary is SIGKILLed at random points under a load of
// signed events (1–3 copies each, shuffled, a share of them impossible) and
// restarted; the sender retries whatever got no 2xx.
func TestCrash(t *testing.T) {
	t.Parallel()
	kills := pick(2, 5)
	faults := make([]reliability.Fault, kills)
	for i := range faults {
		faults[i] = reliability.FaultKill
	}
	res := reliability.Run(t, reliability.Scenario{
		Name:        fmt.Sprintf("crash: %d SIGKILLs", kills),
		Payments:    pick(60, 400),
		PoisonEvery: 10,
		Faults:      faults,
		FaultGap:    [2]time.Duration{pick(time.Second, 2*time.Second), pick(2*time.Second, 5*time.Second)},
		Rate:        pick(120.0, 150.0),
		Seed:        seed,
	})
	requireClean(t, res)
	require.Equal(t, kills, res.Report.Kills)
	require.NotZero(t, res.Report.Poison, "the poison share reached the poison queue")
	requireRecovery(t, res.Report)
}

// TestInstances: two, then three, instances on one database with the load
// spread over them (and, in the long run, one of three killed): nothing is
// applied twice, and the periodic jobs run once per period.
func TestInstances(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d instances", n), func(t *testing.T) {
			t.Parallel()
			var faults []reliability.Fault
			if long && n == 3 {
				faults = []reliability.Fault{reliability.FaultKill}
			}
			res := reliability.Run(t, reliability.Scenario{
				Name:        fmt.Sprintf("%d instances, one database", n),
				Payments:    pick(40, 250),
				PoisonEvery: 10,
				Instances:   n,
				Faults:      faults,
				Concurrency: 12,
				Seed:        seed,
				Reconcile:   true,
			})
			requireClean(t, res)
			requireOncePerPeriod(t, res)
			if len(faults) > 0 {
				requireRecovery(t, res.Report)
			}
		})
	}
}

// requireOncePerPeriod: River elects one leader among the instances, and
// only the leader enqueues periodic jobs. Every instance registers the daily
// reconciliation, here scheduled every minute, and the hourly Idempotency-Key
// purge, both with RunOnStart: however many instances started (and
// restarted), each ran once for its period — one reconciliation run per day,
// one purge per hour — and the leader table names at most one live leader.
func requireOncePerPeriod(t *testing.T, res *reliability.Result) {
	t.Helper()
	ctx := context.Background()
	var leaders int
	require.NoError(t, res.Pool.QueryRow(ctx, `SELECT count(*) FROM river_leader WHERE expires_at > now()`).Scan(&leaders))
	require.LessOrEqual(t, leaders, 1, "at most one leader at a time")

	for _, q := range []struct{ what, sql string }{
		{"idempotency_purge jobs per hour", `SELECT date_trunc('hour', created_at)::text, count(*) FROM river_job WHERE kind = 'idempotency_purge' GROUP BY 1`},
		{"scheduled reconcile jobs per day", `SELECT args->>'date', count(*) FROM river_job WHERE kind = 'reconcile' AND (args->>'scheduled')::boolean GROUP BY 1`},
		{"scheduled reconciliation runs per day", `SELECT date::text, count(*) FROM reconciliation_runs WHERE trigger = 'scheduled' GROUP BY 1`},
	} {
		rows, err := res.Pool.Query(ctx, q.sql)
		require.NoError(t, err, q.what)
		periods := 0
		for rows.Next() {
			var period string
			var n int
			require.NoError(t, rows.Scan(&period, &n))
			require.Equal(t, 1, n, "%s: %d in the period %s", q.what, n, period)
			periods++
		}
		require.NoError(t, rows.Err())
		rows.Close()
		if !strings.Contains(q.what, "runs") { // a run row appears once the job has started
			require.NotZero(t, periods, "%s: the periodic job ran at all; the gateways said:\n%s", q.what, periodicLog(res.Logs.String()))
		}
	}
}

// periodicLog picks the gateway log lines that explain periodic jobs and
// leadership.
func periodicLog(logs string) string {
	var b strings.Builder
	for _, line := range strings.Split(logs, "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "periodic") || strings.Contains(l, "leader") || strings.Contains(l, "elector") ||
			strings.Contains(l, "reconcil") || strings.Contains(l, `"level":"error"`) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// TestDatabaseFaults: the private cluster has its paygate connections
// dropped and is restarted (cleanly, and in the long run also crashed)
// mid-load. While it is down the gateway answers 503 promptly, never a 2xx
// and never a hang; it recovers by itself and loses nothing.
func TestDatabaseFaults(t *testing.T) {
	t.Parallel()
	faults := pick(
		[]reliability.Fault{reliability.FaultConnDrop, reliability.FaultDBRestart},
		[]reliability.Fault{reliability.FaultConnDrop, reliability.FaultDBRestart, reliability.FaultConnDrop, reliability.FaultDBCrash, reliability.FaultDBRestart},
	)
	res := reliability.Run(t, reliability.Scenario{
		Name:        "database restarts and dropped connections",
		Payments:    pick(40, 250),
		PoisonEvery: 10,
		Faults:      faults,
		FaultGap:    [2]time.Duration{time.Second, 2 * time.Second},
		Downtime:    2 * time.Second,
		Rate:        pick(100.0, 150.0),
		Seed:        seed,
	})
	requireClean(t, res)
	require.NotEmpty(t, res.Down)
	require.NotEmpty(t, res.DownAttempts, "requests were made while the database was down")
	for _, a := range res.DownAttempts {
		require.Equal(t, 503, a.Status, "while the database is down every answer is 503 (got %d, %s)", a.Status, a.Err)
		require.Less(t, a.Latency, 10*time.Second, "a 503 comes promptly, never a hang")
	}
}
