package reliability

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
)

// Report is the total-queue checker's verdict on one run. Every count is of
// distinct events unless its name says otherwise.
type Report struct {
	Scenario string
	// Attempted events (distinct ids sent), and the deliveries (copies) and
	// HTTP requests made for them.
	Attempted, Deliveries, Requests int
	// Acknowledged events: at least one request got a 2xx.
	Acknowledged int
	// Lost: acknowledged events missing from the inbox or not ending where
	// the model says, plus ledger refs, facts and emails the model has and
	// the gateway does not.
	Lost int
	// Duplicated effects: inbox rows, process_event jobs, or apply_events
	// jobs naming an event, beyond one per event, two "new" answers for one
	// event, ledger refs, facts and emails beyond the model's.
	Duplicated int
	// Unexpected: events in the inbox that were never sent.
	Unexpected int
	// Recovered: acknowledged events that first got no 2xx (no answer, cut
	// answer, 503) and were acknowledged on a retry; CommittedUnanswered of
	// them had in fact been committed by a request whose answer never came
	// (the retry was told "duplicate").
	Recovered, CommittedUnanswered int
	// PaymentsDiffering, TransactionsDiffering: payments and ledger lines
	// that differ from the model; Unbalanced currencies of the trial balance.
	PaymentsDiffering, TransactionsDiffering, Unbalanced int
	// Poison: events in the poison queue as the model says; PoisonLeaks:
	// ledger, fact or history rows caused by a poison event.
	Poison, PoisonLeaks int
	// Faults injected.
	Kills, DBRestarts, ConnDrops int
	// MaxRecovery: the longest time from a gateway restart (or the database
	// coming back) to every event acknowledged until then being applied.
	MaxRecovery time.Duration
	// Answers by status while faults were active ("503", "conn refused"…),
	// and the slowest answer.
	Answers    map[string]int
	MaxLatency time.Duration
	// Problems explains every non-zero bad count (first few of each).
	Problems []string
}

// OK reports a run with nothing lost, doubled, unexpected or different.
func (r *Report) OK() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.Unexpected == 0 && r.Acknowledged == r.Attempted &&
		r.PaymentsDiffering == 0 && r.TransactionsDiffering == 0 && r.Unbalanced == 0 && r.PoisonLeaks == 0
}

func (r *Report) problem(format string, args ...any) {
	if len(r.Problems) < 40 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Tally fills the sender's side of the report from outcomes.
func (r *Report) Tally(outcomes []Outcome) {
	if r.Answers == nil {
		r.Answers = map[string]int{}
	}
	type perEvent struct {
		acked, failedBefore, fresh int
	}
	events := map[string]*perEvent{}
	for _, o := range outcomes {
		r.Deliveries++
		pe := events[o.Event.ID]
		if pe == nil {
			pe = &perEvent{}
			events[o.Event.ID] = pe
		}
		for _, a := range o.Attempts {
			r.Requests++
			if a.Latency > r.MaxLatency {
				r.MaxLatency = a.Latency
			}
			switch {
			case a.Acked():
				r.Answers["2xx"]++
			case a.Status != 0:
				r.Answers[fmt.Sprint(a.Status)]++
			default:
				r.Answers[a.Err]++
			}
		}
		if len(o.Attempts) > 1 {
			pe.failedBefore++
		}
		if o.Acked() {
			last := o.Attempts[len(o.Attempts)-1]
			pe.acked++
			if !last.Duplicate {
				pe.fresh++
			}
		}
	}
	for id, pe := range events {
		r.Attempted++
		if pe.acked > 0 {
			r.Acknowledged++
		} else {
			r.problem("event %s never acknowledged", id)
		}
		if pe.acked > 0 && pe.failedBefore > 0 {
			r.Recovered++
		}
		if pe.fresh > 1 {
			r.Duplicated++
			r.problem("event %s answered duplicate:false %d times", id, pe.fresh)
		}
	}
	// An event none of whose 2xx said "new" was committed by a request
	// whose answer was lost: the kill fell between commit and response.
	for _, pe := range events {
		if pe.acked > 0 && pe.fresh == 0 {
			r.CommittedUnanswered++
		}
	}
}

// Check compares the gateway's database with the model and the workload's
// direct model, after both settled, and fills the database side of r.
func Check(ctx context.Context, t worldtest.T, r *Report, pool *pgxpool.Pool, model *Model, w *Workload, outcomes []Outcome) {
	t.Helper()
	acked := map[string]bool{}
	sent := map[string]bool{}
	for _, o := range outcomes {
		sent[o.Event.ID] = true
		if o.Acked() {
			acked[o.Event.ID] = true
		}
	}

	got, err := inboxStatuses(ctx, pool)
	if err != nil {
		t.Fatalf("read gateway inbox: %v", err)
	}
	want, err := inboxStatuses(ctx, model.World.Pool)
	if err != nil {
		t.Fatalf("read model inbox: %v", err)
	}
	for id := range acked {
		switch {
		case got[id] == "":
			r.Lost++
			r.problem("acknowledged event %s is not in the inbox", id)
		case got[id] != want[id]:
			r.Lost++
			r.problem("event %s ended %s; the model says %s", id, got[id], want[id])
		}
	}
	for id := range got {
		if !sent[id] {
			r.Unexpected++
			r.problem("event %s is in the inbox but was never sent", id)
		}
	}
	for id, why := range w.Poison {
		if acked[id] && got[id] == "poison" {
			r.Poison++
		} else if acked[id] {
			r.problem("poison event %s (%s) ended %q", id, why, got[id])
		}
	}

	// Rows that can only exist twice if dedupe failed.
	for _, q := range []struct{ what, sql string }{
		{"inbox rows", `SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM inbox_events GROUP BY provider, event_id) c WHERE n > 1`},
		{"process_event jobs", `SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM river_job WHERE kind = 'process_event' GROUP BY args->>'provider', args->>'event_id') c WHERE n > 1`},
		{"apply_events jobs of one event", `SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM (` + jobs.EventJobsSQL + `) j WHERE kind = 'apply_events' GROUP BY provider, event_id) c WHERE n > 1`},
		{"ledger transactions", `SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM ledger_transactions GROUP BY ref) c WHERE n > 1`},
	} {
		var n int
		if err := pool.QueryRow(ctx, q.sql).Scan(&n); err != nil {
			t.Fatalf("count duplicate %s: %v", q.what, err)
		}
		if n > 0 {
			r.Duplicated += n
			r.problem("%d duplicate %s", n, q.what)
		}
	}

	// Effects, as sets: the gateway's against the model world's, and the
	// ledger refs against the simulator's own history.
	for _, q := range []struct {
		what, sql string
		direct    map[string]bool
	}{
		{"ledger ref", `SELECT ref FROM ledger_transactions`, w.Refs},
		{"payment fact", `SELECT payment_id || ' ' || key FROM payment_facts`, nil},
		{"email intent", `SELECT kind || ' ' || object_id FROM email_outbox`, nil},
	} {
		gotSet, err := stringSet(ctx, pool, q.sql)
		if err != nil {
			t.Fatalf("read %ss: %v", q.what, err)
		}
		wantSet, err := stringSet(ctx, model.World.Pool, q.sql)
		if err != nil {
			t.Fatalf("read model %ss: %v", q.what, err)
		}
		extra, missing := diff(gotSet, wantSet)
		r.Duplicated += len(extra)
		for _, k := range extra {
			r.problem("%s %s is not in the model", q.what, k)
		}
		for _, k := range missing {
			if orderDependentEmail(k, w) {
				continue
			}
			r.Lost++
			r.problem("%s %s of the model is missing", q.what, k)
		}
		if q.direct != nil {
			extra, missing := diff(gotSet, q.direct)
			for _, k := range extra {
				r.Duplicated++
				r.problem("%s %s is not in the simulator's history", q.what, k)
			}
			for _, k := range missing {
				r.Lost++
				r.problem("%s %s of the simulator's history is missing", q.what, k)
			}
		}
	}

	// Nothing of a poison event anywhere but the inbox.
	poisonIDs := make([]string, 0, len(w.Poison))
	for id := range w.Poison {
		poisonIDs = append(poisonIDs, id)
	}
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM ledger_transactions WHERE event_id = ANY($1))
		     + (SELECT count(*) FROM payment_facts WHERE event_id = ANY($1))
		     + (SELECT count(*) FROM payment_history WHERE event_id = ANY($1))`, poisonIDs).Scan(&r.PoisonLeaks); err != nil {
		t.Fatalf("look for poison effects: %v", err)
	}
	if r.PoisonLeaks > 0 {
		r.problem("%d ledger, fact or history rows come from poison events", r.PoisonLeaks)
	}

	// The books, as worldtest snapshots them.
	gw := &worldtest.World{Pool: pool}
	gs := gw.Snapshot(t, w.Payments, w.PayoutRefs...)
	ms := model.World.Snapshot(t, w.Payments, w.PayoutRefs...)
	for id, want := range ms.Payments {
		if gs.Payments[id] != want {
			r.PaymentsDiffering++
			r.problem("payment %s is %q; the model says %q", id, gs.Payments[id], want)
		}
	}
	extra, missing := diff(toSet(gs.Transactions), toSet(ms.Transactions))
	r.TransactionsDiffering = len(extra) + len(missing)
	for _, l := range extra {
		r.problem("ledger line not in the model: %s", l)
	}
	for _, l := range missing {
		r.problem("model ledger line missing: %s", l)
	}
	for _, tb := range gs.TrialBalance {
		if !strings.HasSuffix(tb, "balanced=true") {
			r.Unbalanced++
			r.problem("trial balance: %s", tb)
		}
	}
	if strings.Join(gs.TrialBalance, "\n") != strings.Join(ms.TrialBalance, "\n") {
		r.problem("trial balance %v; the model's %v", gs.TrialBalance, ms.TrialBalance)
		r.TransactionsDiffering++
	}
}

// orderDependentEmail reports an email intent whose existence depends, by
// design, on arrival order: a refund's confirmation is not sent when its
// failure is already known, so a refund reported failed before its success
// (possible in any shuffled delivery) gets none, while the model, in
// creation order, confirms it first.
func orderDependentEmail(intent string, w *Workload) bool {
	refund, ok := strings.CutPrefix(intent, "refund_confirmation ")
	return ok && w.Refs["stripe:refund:"+refund+":reversal"]
}

func inboxStatuses(ctx context.Context, pool *pgxpool.Pool) (map[string]string, error) {
	rows, err := pool.Query(ctx, `SELECT event_id, status FROM inbox_events WHERE provider = 'stripe'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			return nil, err
		}
		out[id] = status
	}
	return out, rows.Err()
}

func stringSet(ctx context.Context, pool *pgxpool.Pool, sql string) (map[string]bool, error) {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out[s] = true
	}
	return out, rows.Err()
}

func toSet(xs []string) map[string]bool {
	out := make(map[string]bool, len(xs))
	for _, x := range xs {
		out[x] = true
	}
	return out
}

// diff returns what got has beyond want, and what want has that got lacks,
// sorted.
func diff(got, want map[string]bool) (extra, missing []string) {
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	return extra, missing
}

// PrintTable writes the reports as one table.
func PrintTable(out io.Writer, reports []*Report) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tattempted\tacknowledged\tlost\tduplicated effects\trecovered\tkills\tdb faults\tpoison\tmax restart→applied\tslowest answer\t")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n",
			r.Scenario, r.Attempted, r.Acknowledged, r.Lost, r.Duplicated, r.Recovered, r.Kills,
			r.DBRestarts+r.ConnDrops, r.Poison, r.MaxRecovery.Round(100*time.Millisecond), r.MaxLatency.Round(10*time.Millisecond))
	}
	tw.Flush()
}

// Describe writes the details of one report: requests, answers, and any
// problems.
func (r *Report) Describe(out io.Writer) {
	fmt.Fprintf(out, "%s: %d events in %d deliveries and %d requests; %d recovered after a failed attempt, %d of them committed by a request whose answer was lost; %d kills, %d database restarts, %d connection drops\n",
		r.Scenario, r.Attempted, r.Deliveries, r.Requests, r.Recovered, r.CommittedUnanswered, r.Kills, r.DBRestarts, r.ConnDrops)
	keys := make([]string, 0, len(r.Answers))
	for k := range r.Answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, r.Answers[k]))
	}
	fmt.Fprintf(out, "  answers: %s\n", strings.Join(parts, " "))
	for _, p := range r.Problems {
		fmt.Fprintf(out, "  PROBLEM: %s\n", p)
	}
}
