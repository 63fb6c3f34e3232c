package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/outbox"
)

// testSchedule is short so that retries come due within a test; the
// jitter is off so that their times can be asserted.
var testSchedule = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}

type testBundle struct {
	pool       *pgxpool.Pool
	store      *delivery.Store
	dispatcher *delivery.Dispatcher
	relay      *delivery.Relay
	river      *river.Client[pgx.Tx]
}

// setup gives a test its own database, a store that lets endpoints use
// loopback http (the receivers are httptest servers), a dispatcher on
// testSchedule without jitter, and the relay. configure, when given, edits
// the dispatcher's configuration.
func setup(t *testing.T, configure ...func(*delivery.DispatcherConfig)) *testBundle {
	t.Helper()
	pool := testdb.New(t)
	guard := delivery.GuardConfig{AllowPrivate: true}
	cfg := delivery.DispatcherConfig{
		Pool:     pool,
		Sender:   delivery.NewSender(delivery.SenderConfig{Guard: guard, Timeout: 5 * time.Second}),
		Schedule: testSchedule,
		OpsEmail: "ops@example.com",
		Jitter:   func(d time.Duration) time.Duration { return d },
	}
	for _, f := range configure {
		f(&cfg)
	}
	dispatcher := delivery.NewDispatcher(cfg)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true, Register: func(w *river.Workers) []*river.PeriodicJob {
		river.AddWorker(w, &delivery.DeliverWorker{Dispatcher: dispatcher})
		return nil
	}})
	require.NoError(t, err)
	return &testBundle{
		pool:       pool,
		store:      delivery.NewStore(pool, guard),
		dispatcher: dispatcher,
		relay:      delivery.NewRelay(delivery.RelayConfig{Pool: pool, River: jc.River}),
		river:      jc.River,
	}
}

// message builds the seq-th message of payment paymentID, created now.
func message(t *testing.T, paymentID string, seq int64, typ string) outbox.Message {
	t.Helper()
	return messageAt(t, paymentID, seq, typ, time.Now())
}

func messageAt(t *testing.T, paymentID string, seq int64, typ string, at time.Time) outbox.Message {
	t.Helper()
	m, err := outbox.New(outbox.AggregatePayment, paymentID, seq, typ, at, map[string]any{
		"payment": map[string]any{"id": paymentID, "status": typ},
	})
	require.NoError(t, err)
	return m
}

// write commits msgs in one transaction, as a change would.
func (b *testBundle) write(t *testing.T, msgs ...outbox.Message) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		return outbox.WriteTx(t.Context(), tx, msgs)
	}))
}

func (b *testBundle) step(t *testing.T) {
	t.Helper()
	require.NoError(t, b.relay.Step(t.Context()))
}

func (b *testBundle) dispatch(t *testing.T, endpointID string) int {
	t.Helper()
	n, err := b.dispatcher.Dispatch(t.Context(), b.river, endpointID)
	require.NoError(t, err)
	return n
}

func (b *testBundle) endpoint(t *testing.T, url string, types ...string) delivery.Endpoint {
	t.Helper()
	if len(types) == 0 {
		types = []string{delivery.AllTypes}
	}
	e, err := b.store.Create(t.Context(), delivery.NewEndpoint{URL: url, EventTypes: types})
	require.NoError(t, err)
	return e
}

func (b *testBundle) getEndpoint(t *testing.T, id string) delivery.Endpoint {
	t.Helper()
	e, err := delivery.GetEndpoint(t.Context(), b.pool, id)
	require.NoError(t, err)
	return e
}

// delivery returns message messageID's delivery at endpoint endpointID;
// the test fails if there is none.
func (b *testBundle) delivery(t *testing.T, endpointID, messageID string) delivery.Delivery {
	t.Helper()
	ds, _, err := delivery.ListDeliveries(t.Context(), b.pool, endpointID, delivery.DeliveryFilter{MessageID: messageID}, "", 10)
	require.NoError(t, err)
	require.Len(t, ds, 1, "delivery of %s at %s", messageID, endpointID)
	return ds[0]
}

// deliveries returns the ids of the messages endpointID has deliveries of,
// in feed order.
func (b *testBundle) deliveries(t *testing.T, endpointID string) []string {
	t.Helper()
	ds, _, err := delivery.ListDeliveries(t.Context(), b.pool, endpointID, delivery.DeliveryFilter{}, "", 1000)
	require.NoError(t, err)
	var ids []string
	for _, d := range slices.Backward(ds) {
		ids = append(ids, d.MessageID)
	}
	return ids
}

func (b *testBundle) attempts(t *testing.T, endpointID, messageID string) []delivery.Attempt {
	t.Helper()
	as, err := delivery.Attempts(t.Context(), b.pool, endpointID, messageID)
	require.NoError(t, err)
	return as
}

func (b *testBundle) pending(t *testing.T, endpointID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT count(*) FROM delivery_queue WHERE endpoint_id = $1 AND status = 'pending'`, endpointID).Scan(&n))
	return n
}

func (b *testBundle) disabledEmails(t *testing.T, endpointID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM email_outbox
		WHERE kind = 'endpoint_disabled' AND data->>'endpoint_id' = $1 AND recipient = 'ops@example.com'`,
		endpointID).Scan(&n))
	return n
}

// drain dispatches endpointID until none of its deliveries is pending,
// waiting for retries to come due; it fails the test after 5 s.
func (b *testBundle) drain(t *testing.T, endpointID string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.pending(t, endpointID) > 0 {
		require.True(t, time.Now().Before(deadline), "deliveries of %s still pending", endpointID)
		if b.dispatch(t, endpointID) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// request is what a receiver got.
type request struct {
	ID        string
	Timestamp string
	Signature string
	Header    http.Header
	Body      []byte
	Payment   string
	Sequence  int64
}

// String keeps failure messages short: which message, of which payment.
func (r request) String() string { return fmt.Sprintf("%s(%s #%d)", r.ID, r.Payment, r.Sequence) }

// answer writes the response to one request.
type answer func(w http.ResponseWriter, r request)

func status(code int) answer {
	return func(w http.ResponseWriter, _ request) {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "answer "+strconv.Itoa(code))
	}
}

// receiver is a merchant's endpoint: it records every request, answers as
// told, and measures how many requests it serves at once, overall and per
// message.
type receiver struct {
	*httptest.Server
	mu          sync.Mutex
	answer      answer
	got         []request
	inFlight    int
	maxInFlight int
	perID       map[string]int
	maxPerID    int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rcv := &receiver{answer: status(http.StatusOK), perID: map[string]int{}}
	rcv.Server = httptest.NewServer(http.HandlerFunc(rcv.serve))
	t.Cleanup(rcv.Close)
	return rcv
}

func (rcv *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := request{
		ID: r.Header.Get("webhook-id"), Timestamp: r.Header.Get("webhook-timestamp"),
		Signature: r.Header.Get("webhook-signature"), Header: r.Header.Clone(), Body: body,
	}
	var env struct {
		Sequence int64 `json:"sequence"`
		Data     struct {
			Payment struct {
				ID string `json:"id"`
			} `json:"payment"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &env)
	req.Payment, req.Sequence = env.Data.Payment.ID, env.Sequence

	rcv.mu.Lock()
	rcv.got = append(rcv.got, req)
	rcv.inFlight++
	rcv.maxInFlight = max(rcv.maxInFlight, rcv.inFlight)
	rcv.perID[req.ID]++
	rcv.maxPerID = max(rcv.maxPerID, rcv.perID[req.ID])
	respond := rcv.answer
	rcv.mu.Unlock()

	respond(w, req)

	rcv.mu.Lock()
	rcv.inFlight--
	rcv.perID[req.ID]--
	rcv.mu.Unlock()
}

// blockingReceiver is a receiver whose answers (code) wait until release
// is called, at the latest when the test ends.
func blockingReceiver(t *testing.T, code int) (rcv *receiver, release func()) {
	t.Helper()
	rcv = newReceiver(t)
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	// Registered after the server's Close, so it runs before it: Close
	// waits for the requests being answered.
	t.Cleanup(release)
	rcv.setAnswer(func(w http.ResponseWriter, _ request) {
		<-ch
		w.WriteHeader(code)
	})
	return rcv, release
}

func (rcv *receiver) setAnswer(a answer) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	rcv.answer = a
}

func (rcv *receiver) requests() []request {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return slices.Clone(rcv.got)
}

func (rcv *receiver) count(id string) int {
	n := 0
	for _, r := range rcv.requests() {
		if r.ID == id {
			n++
		}
	}
	return n
}

// requireInOrder fails unless, for every payment, the receiver saw its
// messages' sequences never going back: message n+1 came only after the
// last attempt at n.
func requireInOrder(t *testing.T, got []request) {
	t.Helper()
	last := map[string]int64{}
	for i, r := range got {
		require.GreaterOrEqual(t, r.Sequence, last[r.Payment],
			"request %d: %s sequence %d after sequence %d", i, r.Payment, r.Sequence, last[r.Payment])
		last[r.Payment] = r.Sequence
	}
}

// requireDelay fails unless next is delay after a moment between before
// and after (the attempt's record), give or take the database's
// microseconds.
func requireDelay(t *testing.T, delay time.Duration, before, after time.Time, next *time.Time, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, next, msgAndArgs...)
	require.WithinRange(t, *next, before.Add(delay-time.Millisecond), after.Add(delay+time.Millisecond), msgAndArgs...)
}

// TestDispatchSuccess: a 2xx settles the delivery with one attempt that
// keeps the response, and the receiver gets the message's exact bytes
// under the Standard Webhooks headers, webhook-id being the message id.
func TestDispatchSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	rcv.setAnswer(func(w http.ResponseWriter, _ request) {
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	e := b.endpoint(t, rcv.URL)
	m := message(t, "pi_ok", 1, "payment.succeeded")
	b.write(t, m)
	b.step(t)

	before := time.Now()
	require.Equal(t, 1, b.dispatch(t, e.ID))

	got := rcv.requests()
	require.Len(t, got, 1)
	require.Equal(t, m.Body, got[0].Body, "the stored bytes, unchanged")
	require.Equal(t, m.ID, got[0].ID)
	require.Equal(t, "application/json", got[0].Header.Get("content-type"))
	ts, err := strconv.ParseInt(got[0].Timestamp, 10, 64)
	require.NoError(t, err)
	require.InDelta(t, before.Unix(), ts, 2)
	require.Regexp(t, `^v1,[A-Za-z0-9+/]+=*$`, got[0].Signature)
	require.True(t, verifies(t, e.Secret, got[0]), "signed with the endpoint's secret")

	d := b.delivery(t, e.ID, m.ID)
	require.Equal(t, delivery.DeliverySucceeded, d.Status)
	require.Equal(t, 1, d.Attempts)
	require.Nil(t, d.NextAttemptAt)
	require.Equal(t, http.StatusAccepted, *d.ResponseStatus)
	as := b.attempts(t, e.ID, m.ID)
	require.Len(t, as, 1)
	require.Equal(t, 1, as[0].Attempt)
	require.Equal(t, "scheduled", as[0].Trigger)
	require.Equal(t, http.StatusAccepted, *as[0].ResponseStatus)
	require.Equal(t, `{"ok":true}`, as[0].ResponseBody)
	require.Empty(t, as[0].Error)

	e = b.getEndpoint(t, e.ID)
	require.NotNil(t, e.LastSuccessAt)
	require.Nil(t, e.FailingSince)
	require.Zero(t, b.dispatch(t, e.ID), "nothing left to send")
	require.Len(t, rcv.requests(), 1)
}

// TestDispatchRetriesOnSchedule: a failed attempt is recorded with the
// next one at now + the schedule's first delay, not sooner; the retry
// succeeds and both attempts are kept. A 429's Retry-After sets the next
// attempt instead of the schedule.
func TestDispatchRetriesOnSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.DispatcherConfig) {
		c.Schedule = []time.Duration{time.Second, time.Hour} // wide enough for a loaded machine
	})
	rcv := newReceiver(t)
	rcv.setAnswer(status(http.StatusInternalServerError))
	e := b.endpoint(t, rcv.URL, "payment.processing")
	m := message(t, "pi_retry", 1, "payment.processing")
	b.write(t, m)
	b.step(t)

	before := time.Now()
	require.Equal(t, 1, b.dispatch(t, e.ID))
	after := time.Now()
	d := b.delivery(t, e.ID, m.ID)
	require.Equal(t, delivery.DeliveryPending, d.Status)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, http.StatusInternalServerError, *d.ResponseStatus)
	require.Equal(t, "the endpoint answered 500", d.Error)
	requireDelay(t, time.Second, before, after, d.NextAttemptAt)
	as := b.attempts(t, e.ID, m.ID)
	require.Len(t, as, 1)
	require.Equal(t, "scheduled", as[0].Trigger)
	require.Equal(t, http.StatusInternalServerError, *as[0].ResponseStatus)
	require.Equal(t, "answer 500", as[0].ResponseBody)
	require.NotNil(t, b.getEndpoint(t, e.ID).FailingSince)

	require.Zero(t, b.dispatch(t, e.ID), "not due before the schedule says")
	require.Len(t, rcv.requests(), 1)

	// Meanwhile another endpoint asks for three seconds' wait.
	slow := newReceiver(t)
	slow.setAnswer(func(w http.ResponseWriter, _ request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	throttled := b.endpoint(t, slow.URL, "payment.succeeded")
	m2 := message(t, "pi_slow", 1, "payment.succeeded")
	b.write(t, m2)
	b.step(t)
	throttledAt := time.Now()
	before = throttledAt
	require.Equal(t, 1, b.dispatch(t, throttled.ID))
	after = time.Now()
	throttledDone := after
	d2 := b.delivery(t, throttled.ID, m2.ID)
	require.Equal(t, delivery.DeliveryPending, d2.Status)
	require.Equal(t, http.StatusTooManyRequests, *d2.ResponseStatus)
	requireDelay(t, 3*time.Second, before, after, d2.NextAttemptAt, "Retry-After: 3, not the schedule's 1s")

	rcv.setAnswer(status(http.StatusOK))
	time.Sleep(time.Until(*d.NextAttemptAt) + 10*time.Millisecond)
	require.Equal(t, 1, b.dispatch(t, e.ID))
	d = b.delivery(t, e.ID, m.ID)
	require.Equal(t, delivery.DeliverySucceeded, d.Status)
	require.Equal(t, 2, d.Attempts)
	as = b.attempts(t, e.ID, m.ID)
	require.Len(t, as, 2)
	require.Equal(t, []int{1, 2}, []int{as[0].Attempt, as[1].Attempt})
	require.Equal(t, "scheduled", as[1].Trigger)
	require.Equal(t, http.StatusOK, *as[1].ResponseStatus)
	require.Nil(t, b.getEndpoint(t, e.ID).FailingSince, "a success ends the failing streak")

	// The schedule's second has passed, Retry-After's three have not.
	time.Sleep(time.Until(throttledDone.Add(1300 * time.Millisecond)))
	require.Zero(t, b.dispatch(t, throttled.ID))
	require.Less(t, time.Since(throttledAt), 2800*time.Millisecond, "too slow to tell the delays apart")
	require.Len(t, slow.requests(), 1)
}

// TestDispatchExhaustedReleasesNext: once the schedule is spent the
// delivery is failed, and only then does the payment's next message go;
// other payments' messages go meanwhile, each payment in sequence order.
func TestDispatchExhaustedReleasesNext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	bad := outbox.ID(outbox.AggregatePayment, "pi_a", 1)
	rcv.setAnswer(func(w http.ResponseWriter, r request) {
		if r.ID == bad {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	e := b.endpoint(t, rcv.URL)
	// Three payments' messages interleaved, over two transactions and two
	// fan-outs, so a payment's messages are split across them.
	var first, second []outbox.Message
	for seq := int64(1); seq <= 4; seq++ {
		for _, p := range []string{"pi_a", "pi_b", "pi_c"} {
			if seq <= 2 {
				first = append(first, message(t, p, seq, "payment.processing"))
			} else {
				second = append(second, message(t, p, seq, "payment.succeeded"))
			}
		}
	}
	b.write(t, first...)
	b.step(t)
	b.write(t, second...)
	b.step(t)

	b.drain(t, e.ID)

	got := rcv.requests()
	requireInOrder(t, got)
	require.Equal(t, len(testSchedule)+1, rcv.count(bad), "one attempt and one per step of the schedule")
	d := b.delivery(t, e.ID, bad)
	require.Equal(t, delivery.DeliveryFailed, d.Status)
	require.Equal(t, len(testSchedule)+1, d.Attempts)
	require.Nil(t, d.NextAttemptAt)
	lastBad := slices.IndexFunc(got, func(r request) bool { return r.Payment == "pi_a" && r.Sequence == 2 })
	require.Positive(t, lastBad)
	for _, r := range got[lastBad:] {
		require.NotEqual(t, bad, r.ID, "pi_a's second message went before its first was settled")
	}
	for _, m := range append(first, second...) {
		if m.ID == bad {
			continue
		}
		require.Equal(t, 1, rcv.count(m.ID), "%s %d", m.AggregateID, m.Sequence)
		require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m.ID).Status)
	}
}

// TestDispatchGone: a 410 disables the endpoint at once, with its reason
// and one email to ops; its messages are kept pending and nothing is sent
// until it is enabled again, when they all go, in order.
func TestDispatchGone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	rcv.setAnswer(status(http.StatusGone))
	e := b.endpoint(t, rcv.URL)
	m1 := message(t, "pi_gone", 1, "payment.processing")
	b.write(t, m1)
	b.step(t)

	require.Equal(t, 1, b.dispatch(t, e.ID))
	e = b.getEndpoint(t, e.ID)
	require.Equal(t, delivery.StatusDisabled, e.Status)
	require.Equal(t, "the endpoint answered 410 Gone", e.DisabledReason)
	require.Equal(t, 1, b.disabledEmails(t, e.ID))
	d := b.delivery(t, e.ID, m1.ID)
	require.Equal(t, delivery.DeliveryPending, d.Status)
	require.Equal(t, http.StatusGone, *d.ResponseStatus)

	m2 := message(t, "pi_gone", 2, "payment.succeeded")
	b.write(t, m2)
	b.step(t)
	require.Zero(t, b.dispatch(t, e.ID))
	require.Len(t, rcv.requests(), 1, "nothing sent while disabled")
	require.Equal(t, delivery.DeliveryPending, b.delivery(t, e.ID, m2.ID).Status)
	require.Equal(t, 1, b.disabledEmails(t, e.ID))

	rcv.setAnswer(status(http.StatusOK))
	enabled := delivery.StatusEnabled
	e, err := b.store.Update(t.Context(), e.ID, delivery.Patch{Status: &enabled})
	require.NoError(t, err)
	require.Empty(t, e.DisabledReason)
	require.Equal(t, 2, b.dispatch(t, e.ID))
	got := rcv.requests()
	require.Len(t, got, 3)
	require.Equal(t, []string{m1.ID, m1.ID, m2.ID}, []string{got[0].ID, got[1].ID, got[2].ID})
	require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m1.ID).Status)
	require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m2.ID).Status)
}

// TestDispatchDisablesAfterFailingTooLong: an endpoint is disabled, and
// ops told once, when every attempt failed for DisableAfter; a success
// starts the count again.
func TestDispatchDisablesAfterFailingTooLong(t *testing.T) {
	t.Parallel()
	const disableAfter = time.Second // wide enough for a loaded machine
	b := setup(t, func(c *delivery.DispatcherConfig) {
		c.DisableAfter = disableAfter
		c.Schedule = slices.Repeat([]time.Duration{100 * time.Millisecond}, 60)
	})
	rcv := newReceiver(t)
	rcv.setAnswer(status(http.StatusInternalServerError))
	e := b.endpoint(t, rcv.URL)
	m1 := message(t, "pi_flaky", 1, "payment.succeeded")
	b.write(t, m1)
	b.step(t)

	require.GreaterOrEqual(t, b.dispatch(t, e.ID), 1) // retries may come due within one call on a loaded machine
	e = b.getEndpoint(t, e.ID)
	require.NotNil(t, e.FailingSince)
	require.NotNil(t, e.LastFailureAt)
	require.Equal(t, delivery.StatusEnabled, e.Status)

	// Longer than DisableAfter, then a success: the streak is over.
	time.Sleep(disableAfter + 50*time.Millisecond)
	rcv.setAnswer(status(http.StatusOK))
	require.GreaterOrEqual(t, b.dispatch(t, e.ID), 1) // retries may come due within one call on a loaded machine
	e = b.getEndpoint(t, e.ID)
	require.Nil(t, e.FailingSince)
	require.NotNil(t, e.LastSuccessAt)
	require.Equal(t, delivery.StatusEnabled, e.Status)

	// A new streak: not disabled at its first failure, but once it lasted
	// DisableAfter.
	rcv.setAnswer(status(http.StatusInternalServerError))
	m2 := message(t, "pi_flaky2", 1, "payment.succeeded")
	b.write(t, m2)
	b.step(t)
	start := time.Now()
	require.GreaterOrEqual(t, b.dispatch(t, e.ID), 1) // retries may come due within one call on a loaded machine
	require.Equal(t, delivery.StatusEnabled, b.getEndpoint(t, e.ID).Status, "the earlier streak was ended by a success")
	for b.getEndpoint(t, e.ID).Status == delivery.StatusEnabled {
		require.Less(t, time.Since(start), 10*time.Second, "never disabled")
		time.Sleep(20 * time.Millisecond)
		b.dispatch(t, e.ID)
	}
	require.GreaterOrEqual(t, time.Since(start), disableAfter)
	e = b.getEndpoint(t, e.ID)
	require.Contains(t, e.DisabledReason, "every attempt failed since ")
	require.Equal(t, 1, b.disabledEmails(t, e.ID))
	require.Equal(t, delivery.DeliveryPending, b.delivery(t, e.ID, m2.ID).Status, "kept for when it is enabled")

	sent := len(rcv.requests())
	time.Sleep(60 * time.Millisecond)
	require.Zero(t, b.dispatch(t, e.ID))
	require.Len(t, rcv.requests(), sent)
	require.Equal(t, 1, b.disabledEmails(t, e.ID))
}

// TestDispatchBoundsInFlight: however many dispatchers run for an endpoint
// (two instances here), it never has more than MaxInFlight requests at
// once.
func TestDispatchBoundsInFlight(t *testing.T) {
	t.Parallel()
	const maxInFlight = 4
	b := setup(t, func(c *delivery.DispatcherConfig) { c.MaxInFlight = maxInFlight })
	rcv, release := blockingReceiver(t, http.StatusOK)
	e := b.endpoint(t, rcv.URL)
	var msgs []outbox.Message
	for i := range 10 {
		msgs = append(msgs, message(t, "pi_"+strconv.Itoa(i), 1, "payment.succeeded"))
	}
	b.write(t, msgs...)
	b.step(t)

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			_, err := b.dispatcher.Dispatch(context.WithoutCancel(t.Context()), b.river, e.ID)
			errs <- err
		})
	}
	require.Eventually(t, func() bool { return len(rcv.requests()) == maxInFlight }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // a fifth would have come by now
	require.Len(t, rcv.requests(), maxInFlight)

	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	b.drain(t, e.ID)
	require.Len(t, rcv.requests(), 10)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	require.Equal(t, maxInFlight, rcv.maxInFlight)
}

// TestDispatchConcurrentDispatchers: two dispatchers of one endpoint never
// send a message at the same time, each message is delivered once when
// the receiver accepts it, and each payment's messages go in order.
func TestDispatchConcurrentDispatchers(t *testing.T) {
	t.Parallel()
	b := setup(t) // MaxInFlight 16, more than the 6 payments' messages due at once
	rcv := newReceiver(t)
	rcv.setAnswer(func(w http.ResponseWriter, _ request) {
		time.Sleep(15 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	})
	e := b.endpoint(t, rcv.URL)
	var msgs []outbox.Message
	for seq := int64(1); seq <= 4; seq++ {
		for p := range 6 {
			msgs = append(msgs, message(t, "pi_"+strconv.Itoa(p), seq, "payment.succeeded"))
		}
	}
	b.write(t, msgs...)
	b.step(t)

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := b.dispatcher.Dispatch(t.Context(), b.river, e.ID); err != nil {
					t.Error(err)
					return
				}
				var pending int
				if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND status = 'pending'`, e.ID).Scan(&pending); err != nil {
					t.Error(err)
					return
				}
				if pending == 0 {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()

	got := rcv.requests()
	require.Len(t, got, len(msgs))
	for _, m := range msgs {
		require.Equal(t, 1, rcv.count(m.ID), "%s %d", m.AggregateID, m.Sequence)
		require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m.ID).Status)
	}
	requireInOrder(t, got)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	require.Equal(t, 1, rcv.maxPerID)
	require.Greater(t, rcv.maxInFlight, 1, "payments went in parallel")
}

// TestDispatchSlowEndpointLetsUnsentClaimsGo: a lane claims more messages
// than the endpoint may have in flight; when the endpoint holds every
// slot for a whole attempt's time, the messages that found no slot go
// back to the queue with no attempt recorded (they were never sent), and
// go out once the endpoint answers.
func TestDispatchSlowEndpointLetsUnsentClaimsGo(t *testing.T) {
	t.Parallel()
	const maxInFlight = 2
	b := setup(t, func(c *delivery.DispatcherConfig) {
		c.MaxInFlight = maxInFlight
		c.Sender = delivery.NewSender(delivery.SenderConfig{Guard: delivery.GuardConfig{AllowPrivate: true}, Timeout: time.Second})
	})
	rcv, release := blockingReceiver(t, http.StatusOK)
	e := b.endpoint(t, rcv.URL)
	var msgs []outbox.Message
	for i := range 12 {
		msgs = append(msgs, message(t, "pi_"+strconv.Itoa(i), 1, "payment.succeeded"))
	}
	b.write(t, msgs...)
	b.step(t)

	// One batch per lane: every attempt times out after 1 s, and a lane
	// stops claiming with less than an attempt and 5 s left. Each lane
	// claims 4 messages for the 2 slots.
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second+500*time.Millisecond)
	defer cancel()
	_, err := b.dispatcher.Dispatch(ctx, b.river, e.ID)
	require.NoError(t, err)
	var attempted, untried int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT
			count(*) FILTER (WHERE attempts > 0),
			count(*) FILTER (WHERE attempts = 0 AND status = 'pending' AND next_attempt_at <= now())
		FROM deliveries WHERE endpoint_id = $1`, e.ID).Scan(&attempted, &untried))
	for _, m := range msgs {
		n := len(b.attempts(t, e.ID, m.ID))
		require.LessOrEqual(t, n, 1)
	}
	require.Equal(t, len(rcv.requests()), attempted, "an attempt recorded for each request made, none for a message not sent")
	require.LessOrEqual(t, attempted, 2*maxInFlight, "messages past the in-flight bound waited one attempt's time at most, then went back unsent")
	require.Positive(t, untried, "due again at once")

	release()
	b.drain(t, e.ID)
	for _, m := range msgs {
		require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m.ID).Status)
	}
}

// TestDispatchOneDispatcherPerEndpoint: while an endpoint's dispatcher
// runs, another (another instance's) returns at once without sending.
func TestDispatchOneDispatcherPerEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv, release := blockingReceiver(t, http.StatusOK)
	e := b.endpoint(t, rcv.URL)
	b.write(t, message(t, "pi_1", 1, "payment.succeeded"))
	b.step(t)

	done := make(chan error, 1)
	go func() {
		_, err := b.dispatcher.Dispatch(context.WithoutCancel(t.Context()), b.river, e.ID)
		done <- err
	}()
	require.Eventually(t, func() bool { return len(rcv.requests()) == 1 }, 5*time.Second, 5*time.Millisecond)
	n, err := b.dispatcher.Dispatch(t.Context(), b.river, e.ID)
	require.NoError(t, err)
	require.Zero(t, n, "the second dispatcher left the endpoint to the first")
	release()
	require.NoError(t, <-done)
	require.Len(t, rcv.requests(), 1)
}
