package reliability

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

// Fault is one injected failure.
type Fault string

const (
	// FaultKill SIGKILLs one gateway instance (chosen at random) and
	// restarts it on the same address after Scenario.Downtime.
	FaultKill Fault = "kill"
	// FaultDBRestart stops the private cluster cleanly (pg_ctl -m fast),
	// keeps it down for Scenario.Downtime, and starts it again.
	FaultDBRestart Fault = "db-restart"
	// FaultDBCrash stops the private cluster as a crash would (pg_ctl -m
	// immediate: no checkpoint, recovery replays the WAL on start).
	FaultDBCrash Fault = "db-crash"
	// FaultConnDrop terminates every paygate connection
	// (pg_terminate_backend), as a network cut or an operator would.
	FaultConnDrop Fault = "conn-drop"
)

func (f Fault) needsCluster() bool {
	return f == FaultDBRestart || f == FaultDBCrash || f == FaultConnDrop
}

// Scenario describes one run: a workload delivered to some instances while
// faults are injected.
type Scenario struct {
	Name        string
	Payments    int
	PoisonEvery int // see WorkloadOpts
	MaxCopies   int // copies per event, 1 to MaxCopies; default 3
	Instances   int // gateway instances on the one database; default 1
	// Faults are injected in order while the first wave is delivered, a
	// random FaultGap apart.
	Faults   []Fault
	FaultGap [2]time.Duration
	// Downtime is how long a killed gateway or a stopped database stays
	// down; default 300ms.
	Downtime    time.Duration
	Rate        float64 // deliveries per second; 0: as fast as the gateway answers
	Concurrency int     // concurrent requests; default 8
	Seed        int64   // 0: random (printed, to replay a failure)
	// SettleTimeout bounds the wait for everything to be applied; default
	// 3 minutes.
	SettleTimeout time.Duration
	// Env adds gateway settings.
	Env []string
	// Reconcile serves the simulator's API to the gateways and schedules
	// the daily reconciliation every minute (PAYGATE_RECONCILE_AT), so that
	// several instances have a periodic job to agree on.
	Reconcile bool
}

// Result is a finished run, for scenario-specific checks.
type Result struct {
	Report   *Report
	Workload *Workload
	Gateways []*Gateway
	Cluster  *Cluster      // nil when the run used the shared test server
	Pool     *pgxpool.Pool // the gateways' database, read by the harness
	Logs     *Logs
	// Down lists the windows when the database was stopped; DownAttempts
	// the requests made entirely inside them.
	Down         []Window
	DownAttempts []Attempt
}

// Window is a span of time.
type Window struct{ From, To time.Time }

// AllLogs collects every gateway's output of the test process, for the log
// scan after the whole suite.
var AllLogs = &Logs{}

// Run plays scenario sc and checks the outcome; it fails t on setup errors
// and returns the report for the caller's assertions.
func Run(t *testing.T, sc Scenario) *Result {
	t.Helper()
	if sc.MaxCopies <= 0 {
		sc.MaxCopies = 3
	}
	if sc.Instances <= 0 {
		sc.Instances = 1
	}
	if sc.Downtime <= 0 {
		sc.Downtime = 300 * time.Millisecond
	}
	if sc.SettleTimeout <= 0 {
		sc.SettleTimeout = 3 * time.Minute
	}
	if sc.FaultGap[1] <= sc.FaultGap[0] {
		sc.FaultGap = [2]time.Duration{time.Second, 3 * time.Second}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()

	res := &Result{Logs: &Logs{}}
	bin, err := Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The gateways' database: a private cluster (the faults may stop it),
	// or a fresh database on the shared test server when no cluster can be
	// started and none of the faults needs one.
	needCluster := false
	for _, f := range sc.Faults {
		needCluster = needCluster || f.needsCluster()
	}
	var dbURL string
	cluster, err := StartCluster(t)
	switch {
	case err == nil:
		res.Cluster = cluster
		if err := cluster.CreateDatabase(ctx, "paygate"); err != nil {
			t.Fatal(err)
		}
		dbURL = cluster.URL("paygate")
	case errors.Is(err, ErrNoPostgresTools) && !needCluster:
		t.Logf("no private cluster (%v): using a database on the test server", err)
		_, dbURL = testdb.NewWithURL(t)
	case errors.Is(err, ErrNoPostgresTools):
		t.Skipf("scenario %s needs a private PostgreSQL cluster: %v", sc.Name, err)
	default:
		t.Fatalf("start private cluster: %v", err)
	}
	if err := Migrate(ctx, bin, dbURL); err != nil {
		t.Fatal(err)
	}
	res.Pool = readerPool(t, ctx, dbURL)

	res.Workload = NewWorkload(WorkloadOpts{Payments: sc.Payments, Seed: sc.Seed, PoisonEvery: sc.PoisonEvery})
	w := res.Workload
	t.Logf("%s: seed %d, %d events in %d waves, %d payments", sc.Name, w.Sim.Seed(), len(w.Events()), len(w.Waves), len(w.Payments))

	env := append([]string(nil), sc.Env...)
	if sc.Reconcile {
		api := httptest.NewServer(w.Sim.Handler())
		t.Cleanup(api.Close)
		env = append(env, "PAYGATE_STRIPE_API_KEY="+w.Sim.APIKey(), "PAYGATE_STRIPE_API_URL="+api.URL,
			"PAYGATE_RECONCILE_AT=* * * * *")
	}

	model := NewModel(t)
	modelErr := make(chan error, 1)
	go func() { modelErr <- model.Apply(ctx, w) }()

	for i := range sc.Instances {
		g, err := NewGateway(GatewayConfig{Binary: bin, DatabaseURL: dbURL, Env: env, Logs: res.Logs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = g.Kill()
		})
		if err := g.Start(ctx); err != nil {
			t.Fatalf("instance %d: %v\n%s", i, err, tail(res.Logs.String()))
		}
		res.Gateways = append(res.Gateways, g)
	}
	t.Cleanup(func() { _, _ = AllLogs.Write([]byte(res.Logs.String())) })

	urls := make([]string, len(res.Gateways))
	for i, g := range res.Gateways {
		urls[i] = g.WebhookURL()
	}
	rng := mrand.New(mrand.NewPCG(uint64(w.Sim.Seed()), 0xc4a05))
	r := &Report{Scenario: sc.Name, Answers: map[string]int{}}
	res.Report = r
	var outcomes []Outcome
	var recoveries recoveryLog
	var chaosErrs []error
	lastRecovery := time.Now()

	for waveN, wave := range w.Waves {
		sender := &Sender{
			Secret:      WebhookSecret,
			Targets:     func() []string { return urls },
			Concurrency: sc.Concurrency,
			Rate:        sc.Rate,
			Seed:        rng.Uint64(),
		}
		plan := Plan(wave, sc.MaxCopies, rng)
		var wg sync.WaitGroup
		loadCtx, stopLoad := context.WithTimeout(ctx, 5*time.Minute)
		var waveOut []Outcome
		wg.Add(1)
		go func() {
			defer wg.Done()
			waveOut = sender.Run(loadCtx, plan)
		}()
		if waveN == 0 && len(sc.Faults) > 0 {
			ch := &chaos{sc: sc, res: res, rng: rng, sender: sender, rec: &recoveries}
			chaosErrs = ch.run(ctx)
			lastRecovery = ch.lastRecovery
			r.Kills, r.DBRestarts, r.ConnDrops = ch.kills, ch.dbRestarts, ch.connDrops
		}
		wg.Wait()
		stopLoad()
		outcomes = append(outcomes, waveOut...)
		acked := sender.AckedIDs()
		if len(acked) < len(wave) {
			t.Errorf("wave %d: only %d of %d events acknowledged before the load deadline", waveN+1, len(acked), len(wave))
		}
		settled, err := WaitSettled(ctx, res.Pool, sc.SettleTimeout, acked)
		if err != nil {
			t.Errorf("wave %d: %v\n%s\nstill pending:\n%s", waveN+1, err, tail(res.Logs.String()), describePending(ctx, res.Pool))
		}
		if waveN == 0 && len(sc.Faults) > 0 {
			// From the last restart (or the database's return) to every
			// acknowledged event applied.
			final := time.Since(lastRecovery)
			if settled > final {
				final = settled
			}
			recoveries.add(final)
		}
	}
	recoveries.wait()
	r.MaxRecovery = recoveries.max()
	for _, err := range chaosErrs {
		t.Errorf("fault injection: %v", err)
	}

	if sc.Reconcile {
		// The leader enqueues the run-on-start periodic jobs a moment after
		// it is elected; under load that moment can be late. Wait for them
		// (bounded) before stopping, so the once-per-period check that
		// follows is never vacuous.
		if err := waitPeriodic(ctx, res.Pool, time.Minute); err != nil {
			t.Errorf("periodic jobs: %v", err)
		}
	}
	for _, g := range res.Gateways {
		if !g.Running() {
			t.Errorf("gateway %s is not running at the end (it should recover from every fault by itself)", g.Addr())
		}
		g.Stop()
	}
	if err := <-modelErr; err != nil {
		t.Fatalf("%v", err)
	}

	r.Tally(outcomes)
	for _, win := range res.Down {
		for _, o := range outcomes {
			for _, a := range o.Attempts {
				if a.Start.After(win.From) && a.Start.Add(a.Latency).Before(win.To) {
					res.DownAttempts = append(res.DownAttempts, a)
				}
			}
		}
	}
	Check(ctx, t, r, res.Pool, model, w, outcomes)
	return res
}

func readerPool(t *testing.T, ctx context.Context, dbURL string) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.ConnectTimeout = 3 * time.Second
	pc.ConnConfig.RuntimeParams["application_name"] = "paygate-reliability" // not dropped with paygate's
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// chaos injects a scenario's faults while its load runs.
type chaos struct {
	sc     Scenario
	res    *Result
	rng    *mrand.Rand
	sender *Sender
	rec    *recoveryLog

	kills, dbRestarts, connDrops int
	lastRecovery                 time.Time
}

func (c *chaos) run(ctx context.Context) []error {
	var errs []error
	for _, f := range c.sc.Faults {
		gap := c.sc.FaultGap[0] + time.Duration(c.rng.Int64N(int64(c.sc.FaultGap[1]-c.sc.FaultGap[0])))
		select {
		case <-ctx.Done():
			return append(errs, ctx.Err())
		case <-time.After(gap):
		}
		ackedBefore := c.sender.AckedIDs()
		var err error
		switch f {
		case FaultKill:
			g := c.res.Gateways[c.rng.IntN(len(c.res.Gateways))]
			if err = g.Kill(); err == nil {
				c.kills++
				time.Sleep(c.sc.Downtime)
				err = g.Start(ctx)
			}
			c.lastRecovery = g.LastStart()
		case FaultDBRestart, FaultDBCrash:
			mode := "fast"
			if f == FaultDBCrash {
				mode = "immediate"
			}
			if err = c.res.Cluster.Stop(mode); err == nil {
				c.dbRestarts++
				down := time.Now()
				time.Sleep(c.sc.Downtime)
				c.res.Down = append(c.res.Down, Window{From: down, To: time.Now()})
				err = c.res.Cluster.Start()
			}
			c.lastRecovery = time.Now()
		case FaultConnDrop:
			var n int
			n, err = TerminateBackends(ctx, c.res.Cluster.URL("postgres"), "paygate")
			if err == nil && n > 0 {
				c.connDrops++
			}
			c.lastRecovery = time.Now()
		default:
			err = fmt.Errorf("unknown fault %q", f)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		c.rec.measure(ctx, c.res.Pool, c.lastRecovery, ackedBefore, c.sc.SettleTimeout)
	}
	return errs
}

// recoveryLog measures, for each fault, the time from recovery (restart,
// database back) until every event acknowledged before the fault is applied
// (in a final status: processed, ignored or poison).
type recoveryLog struct {
	mu   sync.Mutex
	wg   sync.WaitGroup
	durs []time.Duration
}

func (l *recoveryLog) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.durs = append(l.durs, d)
}

func (l *recoveryLog) measure(ctx context.Context, pool *pgxpool.Pool, from time.Time, ids []string, timeout time.Duration) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		for {
			var n int
			err := pool.QueryRow(ctx, `
				SELECT count(*) FROM unnest($1::text[]) AS want(id)
				WHERE NOT EXISTS (SELECT 1 FROM inbox_events
				                  WHERE provider = 'stripe' AND event_id = want.id AND status <> 'received')`, ids).Scan(&n)
			if err == nil && n == 0 {
				l.add(time.Since(from))
				return
			}
			select {
			case <-ctx.Done():
				l.add(time.Since(from))
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

func (l *recoveryLog) wait() { l.wg.Wait() }

func (l *recoveryLog) max() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, d := range l.durs {
		m = max(m, d)
	}
	return m
}

// tail is the end of a log, for failure messages.
func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// describePending lists the events not applied yet with the jobs that name
// them, to explain a run that never settled.
func describePending(ctx context.Context, pool *pgxpool.Pool) string {
	rows, err := pool.Query(ctx, `
		SELECT e.event_id, e.type, e.status, e.attempts, coalesce(e.last_error, ''),
		       coalesce(string_agg(j.id || ':' || j.state || ' attempt ' || j.attempt || '/' || j.max_attempts, ', '), 'no job')
		FROM inbox_events e
		LEFT JOIN (`+jobs.EventJobsSQL+`) ej ON ej.event_id = e.event_id
		LEFT JOIN river_job j ON j.id = ej.job_id
		WHERE e.status = 'received'
		GROUP BY 1, 2, 3, 4, 5 LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, typ, status, lastErr, jobs string
		var attempts int
		if err := rows.Scan(&id, &typ, &status, &attempts, &lastErr, &jobs); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  %s %s %s attempts=%d last_error=%q jobs=[%s]\n", id, typ, status, attempts, lastErr, jobs)
	}
	return b.String()
}

// waitPeriodic waits until the leader has enqueued both periodic jobs every
// instance registers: the Idempotency-Key purge and the scheduled
// reconciliation.
func waitPeriodic(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var purge, reconcile int
		err := pool.QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE kind = 'idempotency_purge'),
			       count(*) FILTER (WHERE kind = 'reconcile' AND (args->>'scheduled')::boolean)
			FROM river_job`).Scan(&purge, &reconcile)
		if err == nil && purge > 0 && reconcile > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var leader string
			_ = pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(leader_id || ' until ' || expires_at::text, ', '), 'none') FROM river_leader`).Scan(&leader)
			return fmt.Errorf("not enqueued within %s (purge jobs %d, scheduled reconcile jobs %d, leader %s, last error %v)", timeout, purge, reconcile, leader, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
