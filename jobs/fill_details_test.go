package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

// fillWorld is a database whose payments were written by the applier, as
// any payment is, and then made to look as they did before paygate kept
// their details: the detail columns blank, no double charge known, the
// fill not done.
type fillWorld struct {
	*applyWorld
	sim *stripesim.Sim
	// applied are the details applying every event left, before they were
	// blanked (the dropped payment's included).
	applied string
	// dropped is the payment whose events' payloads are gone.
	dropped string
	// late are two payments of a manual capture whose capture comes after
	// the upgrade: one applied before the fill, one after.
	late [2]*stripesim.Payment
}

// detailsDump lists the payments' details, one line each in id order, and
// the stamps when stamps is set.
func detailsDump(t *testing.T, q ledger.Querier, stamps bool) string {
	t.Helper()
	col := `''`
	if stamps {
		col = `details_stamps::text`
	}
	rows, err := q.Query(context.Background(), `SELECT id || ' ' || coalesce(reference, '<null>') || ' ' ||
		coalesce(customer, '<null>') || ' ' || coalesce(description, '<null>') || ' ' || metadata::text || ' ' || `+col+`
		FROM payments ORDER BY id`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// restDump lists every other column of the payments: the fill must leave
// them as they are.
func restDump(t *testing.T, q ledger.Querier) string {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT concat_ws(' ', id, provider, status, currency, amount, amount_captured,
		amount_refunded, amount_disputed, coalesce(receipt_email, '<unknown>'), created_at, updated_at, message_sequence)
		FROM payments ORDER BY id`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// fillEvents are the merchant's payments: orders with customers,
// descriptions and metadata, some without anything, an order paid twice
// (once with Stripe, once with Adyen), an order paid twice and refunded
// once, a payment whose payloads will be dropped, and two manual captures.
func fillEvents(t *testing.T, n int) (sim *stripesim.Sim, stripeEvents []stripesim.Event, adyenEvents []inbox.Event,
	dropped string, late [2]*stripesim.Payment) {
	t.Helper()
	sim = stripesim.New(stripesim.Config{Seed: 43})
	ada := sim.CreateCustomer(stripesim.CustomerOpts{Email: "ada@example.test", Name: "Ada"})
	for i := range n {
		opts := stripesim.PayOpts{Amount: int64(1000 + i), Currency: "usd", Email: fmt.Sprintf("c%d@example.test", i)}
		if i%5 != 4 {
			opts.OrderID = fmt.Sprintf("ord-%d", 1000+i)
			opts.Description = fmt.Sprintf("Order ord-%d: %d mugs", 1000+i, i%3+1)
			opts.Metadata = map[string]string{"channel": "web", "cart": fmt.Sprint(i)}
		}
		if i%2 == 0 {
			opts.Customer = ada
		}
		sim.Pay(opts)
	}
	sim.Pay(stripesim.PayOpts{Amount: 4200, Currency: "eur", OrderID: "ord-twice", Customer: ada})
	sim.Pay(stripesim.PayOpts{Amount: 700, Currency: "usd", OrderID: "ord-refunded"})
	sim.Refund(sim.Pay(stripesim.PayOpts{Amount: 700, Currency: "usd", OrderID: "ord-refunded"}), 0)
	dropped = sim.Pay(stripesim.PayOpts{Amount: 900, Currency: "gbp", OrderID: "ord-dropped", Description: "gone"}).ID
	for i := range late {
		late[i] = sim.Pay(stripesim.PayOpts{Amount: 3000, Currency: "usd", ManualCapture: true,
			OrderID: fmt.Sprintf("ord-late-%d", i), Description: "first words"})
	}
	stripeEvents = sim.Events()

	asim := adyensim.New(adyensim.Config{})
	psp, auth := asim.AuthoriseWith(adyensim.AuthoriseOpts{Value: 4200, Currency: "EUR", Reference: "ord-twice",
		ShopperReference: "shopper-7", Metadata: map[string]string{"cart_id": "cart_9"}})
	_, capture := asim.Capture(psp, 4200)
	r, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{asim.HMACKey()}})
	require.NoError(t, err)
	evs, err := r.Receive(http.Header{}, asim.Batch(false, auth, capture), asim.Now())
	require.NoError(t, err)
	for _, e := range evs {
		adyenEvents = append(adyenEvents, asInbox(e))
	}
	return sim, stripeEvents, adyenEvents, dropped, late
}

func asInbox(e provider.Event) inbox.Event {
	created := e.Created
	return inbox.Event{Provider: e.Provider, EventID: e.ID, Type: e.Type, Livemode: e.Livemode,
		APIVersion: e.APIVersion, ProviderCreatedAt: &created, Payload: e.Payload}
}

// applyKeys applies events already stored, as apply_events jobs would.
func (w *applyWorld) applyKeys(t testing.TB, keys []inbox.Key) {
	t.Helper()
	for chunk := range slices.Chunk(keys, maxApplyBatch) {
		for i, err := range w.applier.apply(context.Background(), w.rc, chunk) {
			require.NoError(t, err, chunk[i].EventID)
		}
	}
}

// storeInbox puts any provider's events in the inbox, as ingest does.
func (w *applyWorld) storeInbox(t testing.TB, events []inbox.Event) []inbox.Key {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		_, err := inbox.InsertManyTx(ctx, tx, events)
		return err
	}))
	keys := make([]inbox.Key, len(events))
	for i, e := range events {
		keys[i] = inbox.Key{Provider: e.Provider, EventID: e.EventID}
	}
	return keys
}

// newFillWorld applies n merchant's payments and the others of fillEvents
// through the applier, then takes the database back to before the upgrade.
func newFillWorld(t *testing.T, n int) *fillWorld {
	t.Helper()
	ctx := context.Background()
	sim, stripeEvents, adyenEvents, dropped, late := fillEvents(t, n)
	w := &fillWorld{applyWorld: newApplyWorld(t), sim: sim, dropped: dropped, late: late}
	w.applyKeys(t, append(w.store(t, stripeEvents), w.storeInbox(t, adyenEvents)...))
	w.applied = detailsDump(t, w.pool, false)
	require.Equal(t, 1, w.count(t, `SELECT count(*) FROM double_charges WHERE state = 'open'`),
		"applied after the upgrade, the order paid twice is a double charge")

	_, ids, err := ledger.EventsOfPayment(ctx, w.pool, dropped)
	require.NoError(t, err)
	require.NotEmpty(t, ids)
	w.preUpgrade(t)
	// Payload retention drops the events' rows and keeps their keys.
	tag, err := w.pool.Exec(ctx, `DELETE FROM inbox_events WHERE provider = 'stripe' AND event_id = ANY($1)`, ids)
	require.NoError(t, err)
	require.EqualValues(t, len(ids), tag.RowsAffected())
	return w
}

// preUpgrade blanks what migration 0032 added, as it was for payments
// written before it, and sets the fill back to its start.
func (w *applyWorld) preUpgrade(t testing.TB) {
	t.Helper()
	_, err := w.pool.Exec(context.Background(), `
		UPDATE payments SET reference = NULL, customer = NULL, description = NULL, metadata = '{}', details_stamps = '{}';
		DELETE FROM double_charges;
		DELETE FROM email_outbox WHERE kind = 'double_charge';
		UPDATE payment_details_fill SET after_id = '', filled = 0, done = false, started_at = NULL, finished_at = NULL`)
	require.NoError(t, err)
}

func (w *applyWorld) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, w.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (w *applyWorld) filler(batch int) *detailsFiller {
	f := newDetailsFiller(w.pool, Config{Logger: slog.New(slog.DiscardHandler), Email: EmailConfig{OpsEmail: "ops@example.test"}})
	f.batch = batch
	f.restFactor = 0
	return f
}

// capture captures a late payment after the upgrade and applies it.
func (w *fillWorld) capture(t *testing.T, p *stripesim.Payment) {
	t.Helper()
	before := len(w.sim.Events())
	// A minute on, so that the intent's new words come from an event
	// newer than every earlier one, whatever their ids.
	w.sim.Advance(time.Minute)
	w.sim.UpdatePayment(p, stripesim.PaymentUpdate{Description: "changed words"})
	w.sim.Capture(p)
	w.applyKeys(t, w.store(t, w.sim.Events()[before:]))
}

// wantFilled is what the payments' details must be once filled: what
// applying their events left, but for the dropped payment, which keeps
// nulls, and, when captured, the late ones, whose capture changed their
// description.
func (w *fillWorld) wantFilled(t *testing.T, captured bool) string {
	t.Helper()
	lines := strings.Split(w.applied, "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, w.dropped+" "):
			lines[i] = w.dropped + " <null> <null> <null> {} "
		case captured && (strings.HasPrefix(l, w.late[0].ID+" ") || strings.HasPrefix(l, w.late[1].ID+" ")):
			require.Contains(t, l, "first words")
			lines[i] = strings.Replace(l, "first words", "changed words", 1)
		}
	}
	return strings.Join(lines, "\n")
}

// TestFillDetailsFillsPreUpgradePayments: payments written before the
// upgrade get the details applying their events gives, whatever was
// applied to them before and after the fill; a payment whose payloads were
// dropped keeps nulls; nothing else of the payments changes; the order
// paid twice before the upgrade is detected, with one email to ops; and a
// second fill finds nothing to do.
func TestFillDetailsFillsPreUpgradePayments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newFillWorld(t, 40)
	require.Equal(t, 0, w.count(t, `SELECT count(*) FROM payments WHERE reference IS NOT NULL OR customer IS NOT NULL`))
	require.Contains(t, w.applied, "ord-1000 cus_")
	require.Contains(t, w.applied, "shopper-7")

	w.capture(t, w.late[0]) // after the upgrade, before the fill
	rest := restDump(t, w.pool)

	done, err := w.filler(7).fill(ctx, w.rc, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, rest, restDump(t, w.pool), "the fill writes nothing but the details")
	w.capture(t, w.late[1]) // after the fill
	require.Equal(t, w.wantFilled(t, true), detailsDump(t, w.pool, false))

	fill, err := ledger.GetDetailsFill(ctx, w.pool)
	require.NoError(t, err)
	require.True(t, fill.Done)
	require.NotNil(t, fill.StartedAt)
	require.NotNil(t, fill.FinishedAt)
	withDetails := w.count(t, `SELECT count(*) FROM payments WHERE metadata <> '{}' OR reference IS NOT NULL OR customer IS NOT NULL`)
	require.EqualValues(t, withDetails-1, fill.Filled, "every payment with details but the one captured before the fill")

	charges, _, err := ledger.ListDoubleCharges(ctx, w.pool, ledger.DoubleChargeFilter{State: ledger.DoubleChargeOpen}, "", 10)
	require.NoError(t, err)
	require.Len(t, charges, 1)
	require.Equal(t, "ord-twice", charges[0].Reference)
	require.Len(t, charges[0].Payments, 2)
	require.Equal(t, 1, w.count(t, `SELECT count(*) FROM double_charges`), "an order refunded once is paid once")
	require.Equal(t, 1, w.count(t, `SELECT count(*) FROM email_outbox
		WHERE kind = 'double_charge' AND object_id = 'ord-twice#1' AND recipient = 'ops@example.test' AND status = 'pending'`))
	require.Equal(t, 1, w.count(t, `SELECT count(*) FROM river_job WHERE kind IN ('send_email', 'send_emails')
		AND (args->'outbox_id' = to_jsonb((SELECT id FROM email_outbox WHERE kind = 'double_charge'))
		  OR args->'outbox_ids' @> to_jsonb((SELECT id FROM email_outbox WHERE kind = 'double_charge')))`),
		"the email has its job")

	// Done: a fill asked for again reads one row and fills nothing.
	_, err = w.pool.Exec(ctx, `UPDATE payments SET reference = NULL, customer = NULL, description = NULL,
		metadata = '{}', details_stamps = '{}' WHERE id = $1`, w.late[0].ID)
	require.NoError(t, err)
	blanked := detailsDump(t, w.pool, true)
	done, err = w.filler(7).fill(ctx, w.rc, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, blanked, detailsDump(t, w.pool, true), "a done fill fills nothing again")
}

// TestFillDetailsResumes: a fill cut off anywhere (its context cancelled
// mid-batch, a batch failing on a payment another transaction holds)
// leaves every payment up to where its row says filled and none after, and
// started again finishes with the same details, stamps included, as a fill
// that ran through.
func TestFillDetailsResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newFillWorld(t, 30)
	const batch = 4

	// consistent: the payments up to after_id are filled, the others not.
	consistent := func() ledger.DetailsFill {
		t.Helper()
		fill, err := ledger.GetDetailsFill(ctx, w.pool)
		require.NoError(t, err)
		require.False(t, fill.Done)
		want := strings.Split(w.wantFilled(t, false), "\n")
		got := strings.Split(detailsDump(t, w.pool, false), "\n")
		require.Len(t, got, len(want))
		blank := 0
		for i, l := range got {
			id, _, _ := strings.Cut(l, " ")
			if id <= fill.AfterID {
				require.Equal(t, want[i], l, "filled, up to %s", fill.AfterID)
			} else {
				require.Equal(t, id+" <null> <null> <null> {} ", l, "not yet filled, after %s", fill.AfterID)
				blank++
			}
		}
		require.Positive(t, blank)
		return fill
	}

	rows, err := w.pool.Query(ctx, `SELECT id FROM payments ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)

	// Three batches, then a cancel in the middle of the fourth's
	// transaction: its statements stop where they are.
	f := w.filler(batch)
	for range 3 {
		_, err := f.step(ctx, w.rc, consistent().AfterID)
		require.NoError(t, err)
	}
	require.Equal(t, ids[3*batch-1], consistent().AfterID)
	cut, cancel := context.WithCancel(ctx)
	holder, err := w.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SELECT FROM payments WHERE id = ANY($1) FOR UPDATE`, ids[3*batch:4*batch])
	require.NoError(t, err)
	go func() {
		// Cancel once the fill waits for a lock the holder keeps.
		defer cancel()
		for {
			var waiting int
			err := w.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
			if err != nil || waiting > 0 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err = f.fill(cut, w.rc, time.Now().Add(time.Hour))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, ids[3*batch-1], consistent().AfterID, "the cancelled batch left nothing")

	// A batch that cannot take its payments' locks in time fails whole.
	f.lockTimeout = 50 * time.Millisecond
	_, err = f.fill(ctx, w.rc, time.Now().Add(time.Hour))
	require.Error(t, err)
	require.Equal(t, ids[3*batch-1], consistent().AfterID, "the failed batch left nothing")
	require.NoError(t, holder.Rollback(ctx))

	// Started again, it goes on from there and finishes.
	f = w.filler(batch)
	done, err := f.fill(ctx, w.rc, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, done)
	resumed := detailsDump(t, w.pool, true)
	require.Equal(t, w.wantFilled(t, false), detailsDump(t, w.pool, false))
	require.Equal(t, 1, w.count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'double_charge'`))

	// Through in one go, from the same start, the same.
	w.preUpgrade(t)
	done, err = w.filler(1000).fill(ctx, w.rc, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, resumed, detailsDump(t, w.pool, true))
}

// TestFillDetailsWorkerRunsOnStart: the fill is a periodic job run when
// River starts, which fills the payments and marks itself done.
func TestFillDetailsWorkerRunsOnStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newFillWorld(t, 10)
	client, err := NewClient(w.pool, Config{FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
		Email: EmailConfig{OpsEmail: "ops@example.test"}})
	require.NoError(t, err)
	require.NoError(t, client.River.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.River.StopAndCancel(ctx)
	})
	require.Eventually(t, func() bool {
		return w.count(t, `SELECT count(*) FROM payment_details_fill WHERE done`) == 1
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, w.wantFilled(t, false), detailsDump(t, w.pool, false))
	require.Equal(t, 1, w.count(t, `SELECT count(*) FROM email_outbox WHERE kind = 'double_charge'`))
	require.Eventually(t, func() bool {
		return w.count(t, `SELECT count(*) FROM river_job WHERE kind = 'fill_payment_details' AND state = 'completed'`) == 1
	}, 10*time.Second, 20*time.Millisecond, "the job completes: nothing left to fill")
}

// TestFillDetailsKeepsIngestRate: ingest while the fill runs, as paygate
// runs it, keeps within 10 % of its rate alone.
//
// The fill works in batches and rests fillDetailsRestFactor times as long
// as each batch took, so over time it slows ingest by what a batch costs
// ingest while it runs, times the share of the time it runs. Both are
// measured here. The first: webhooks are ingested all along, and their
// rate is counted in pairs of short phases, alone then with a fill that
// never rests, one right after the other; the median of the pairs' ratios
// is taken (what else the machine does in a moment weighs on both phases
// of a pair alike, and a pair it upset is outvoted). The second: the share
// of its time a fill as paygate runs it spends in its batches, from its own
// account of them. Measuring the resting fill's effect directly would take
// phases of many of its periods (a second's batch and twenty seconds' rest
// on a loaded machine), each long enough for the load to change meanwhile.
func TestFillDetailsKeepsIngestRate(t *testing.T) {
	ctx := context.Background()
	const (
		pairs     = 9
		phase     = time.Second
		ingesters = 4 // requests at once
		payments  = 6000
	)
	w := newApplyWorld(t)
	sim := stripesim.New(stripesim.Config{Seed: 47})
	for i := range payments {
		sim.Pay(stripesim.PayOpts{Amount: int64(1000 + i), Currency: "usd", Email: "c@example.test",
			OrderID: fmt.Sprintf("ord-%d", i), Description: "Order", Metadata: map[string]string{"cart": fmt.Sprint(i)}})
	}
	w.applyKeys(t, w.store(t, sim.Events()))
	client, err := NewClient(w.pool, Config{InsertOnly: true})
	require.NoError(t, err)

	// The share of its time the fill as paygate runs it spends in its
	// batches (small ones, so that a few of its periods take little time),
	// from its account of a slice of a few seconds. The slice ends after a
	// batch, before its rest: the share is if anything overstated.
	var account bytes.Buffer
	w.preUpgrade(t)
	paced := newDetailsFiller(w.pool, Config{Logger: slog.New(slog.NewJSONHandler(&account, nil))})
	paced.batch = 100
	done, err := paced.fill(ctx, w.rc, time.Now().Add(4*time.Second))
	require.NoError(t, err)
	require.False(t, done)
	var last struct {
		Msg     string  `json:"msg"`
		Seconds float64 `json:"seconds"`
		Busy    float64 `json:"busy_seconds"`
	}
	lines := strings.Split(strings.TrimSpace(account.String()), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last))
	require.Equal(t, "filling payments' details, to go on shortly", last.Msg)
	require.Positive(t, last.Busy)
	duty := last.Busy / last.Seconds
	require.Less(t, duty, 2.0/(1+fillDetailsRestFactor), "the fill rests as long as it says")

	// Webhooks commit as the webhook path commits them, each request its
	// own transaction with its apply_events job, until the test ends:
	// events of a payment's size (ingest stores, it does not read them),
	// under ids of their own.
	payload := stripesim.PaymentPairs(1)[0].Payload
	var (
		ingested atomic.Int64
		stream   sync.WaitGroup
		stop     = make(chan struct{})
	)
	for g := range ingesters {
		stream.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("evt_ingest_%d_%d", g, i)
				err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
					if _, err := inbox.InsertManyTx(ctx, tx, []inbox.Event{{Provider: "stripe", EventID: id,
						Type: "payment_intent.succeeded", Payload: payload}}); err != nil {
						return err
					}
					return client.InsertApplyEventsTx(ctx, tx, "stripe", []string{id})
				})
				if err != nil {
					t.Error(err)
					return
				}
				ingested.Add(1)
			}
		})
	}
	defer stream.Wait()
	defer close(stop)
	rate := func() float64 {
		began, n := time.Now(), ingested.Load()
		time.Sleep(phase)
		return float64(ingested.Load()-n) / time.Since(began).Seconds()
	}

	time.Sleep(time.Second) // warm up
	var ratios []float64
	var filled int64
	for range pairs {
		w.preUpgrade(t)
		time.Sleep(time.Second) // the update's aftermath, in neither phase
		alone := rate()

		busy := newDetailsFiller(w.pool, Config{Logger: slog.New(slog.DiscardHandler)})
		busy.restFactor = 0
		busy.batch = 100 // many commits a phase, as a fill of a large table makes
		fctx, cancel := context.WithCancel(ctx)
		exited := make(chan struct{})
		var fillErr error
		go func() {
			defer close(exited)
			_, fillErr = busy.fill(fctx, w.rc, time.Now().Add(time.Hour))
		}()
		along := rate()
		fill, err := ledger.GetDetailsFill(ctx, w.pool)
		require.NoError(t, err)
		require.False(t, fill.Done, "the fill ran all along the phase (else there are too few payments)")
		filled += fill.Filled
		cancel()
		<-exited
		require.ErrorIs(t, fillErr, context.Canceled)
		ratios = append(ratios, along/alone)
	}
	require.Positive(t, filled, "the fill committed batches during the phases")
	slices.Sort(ratios)
	whileBusy := ratios[len(ratios)/2]
	asRun := 1 - duty*(1-whileBusy)
	t.Logf("ingest with the fill in a batch / alone: median %.2f of %.2f; the fill in its batches %.1f%% of its time; "+
		"ingest with the fill as it runs / alone: %.2f", whileBusy, ratios, 100*duty, asRun)
	require.GreaterOrEqual(t, asRun, 0.9, "ingest with the fill running keeps within 10 %% of its rate alone")
}
