package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/statemachine"
)

// applyTimeout bounds one batch's transaction, well within a job's own
// timeout: a batch takes milliseconds.
const applyTimeout = 5 * time.Second

// maxCreationRaces is how many times in a row a batch is applied again at
// once because another transaction created one of its new payments first
// (ledger.ErrPaymentCreatedMeanwhile). One is enough unless that keeps
// happening; after these, the batch fails as any other would.
const maxCreationRaces = 3

// applier applies inbox events to the ledger and the payments, many in one
// transaction: each step below is one statement (or one pipelined round
// trip) for the whole batch, however many events it holds.
//
//  1. lock the events' inbox rows (sorted: concurrent batches never
//     deadlock); skip the ones already done;
//  2. map each payload to its effects, in Go;
//  3. lock the payments concerned (sorted), and read their facts and the
//     ledger transactions already posted under the events' refs; a payment
//     not stored yet is folded from nothing and created in step 5, with its
//     summary, so that it is written once;
//  4. fold each event into its payment, one after the other in the order of
//     the batch, exactly as if each were applied in a transaction of its
//     own: an event that cannot be applied (another currency, a ref that
//     holds a different movement, a transition adding facts cannot make)
//     fails the batch, which is applied again without it;
//  5. write everything: ledger transactions, payments and their history,
//     facts, email intents and their jobs, inbox statuses, messages.
//
// The event left out, and every event of a batch whose transaction failed
// for any other reason, is answered errBatchFailed; it is then applied
// again alone (by its process_event job, the one an apply_events job hands
// it to), in a transaction that commits all of its effects or none,
// where the error belongs to that event only. So an event is applied whole
// or not at all, and one bad event costs its neighbours one rolled-back
// try, not their batching.
type applier struct {
	pool     *pgxpool.Pool
	opsEmail string
	mappers  Mappers
	claims   paymentClaims
	sizes    prometheus.Histogram
	seconds  prometheus.Histogram
}

func newApplier(pool *pgxpool.Pool, opsEmail string, mappers Mappers, reg prometheus.Registerer) *applier {
	a := &applier{
		pool:     pool,
		opsEmail: opsEmail,
		mappers:  mappers,
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "paygate_apply_batch_events",
			Help:    "Events per transaction applying inbox events.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9),
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "paygate_apply_batch_seconds",
			Help:    "Time to apply one batch of inbox events, commit included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	if reg != nil {
		reg.MustRegister(a.sizes, a.seconds)
	}
	return a
}

// apply applies keys in one transaction and returns one outcome per key: nil
// (applied, ignored, or nothing left to do), an error wrapping ErrPermanent
// (not applied and never will be: poison), inbox.ErrNotFound, or another
// error (not applied; try again).
//
// Events of a payment that another batch of this process is applying are
// applied after it, in a transaction of their own (see paymentClaims).
func (a *applier) apply(ctx context.Context, rc *river.Client[pgx.Tx], keys []inbox.Key) []error {
	outcomes := a.applyBatch(ctx, rc, keys)
	for {
		var again []int
		var waits []chan struct{}
		for i, err := range outcomes {
			var d *deferredError
			if errors.As(err, &d) {
				again = append(again, i)
				waits = append(waits, d.released)
			}
		}
		if len(again) == 0 {
			return outcomes
		}
		// Outside any transaction: the claims' holders never wait for us.
		for _, ch := range waits {
			<-ch
		}
		sub := make([]inbox.Key, len(again))
		for j, i := range again {
			sub[j] = keys[i]
		}
		for j, err := range a.applyBatch(ctx, rc, sub) {
			outcomes[again[j]] = err
		}
	}
}

// deferredError is an event left out of its batch because another batch
// held its payment; released is closed when that batch lets it go.
type deferredError struct{ released chan struct{} }

func (*deferredError) Error() string { return "deferred: another batch holds its payment" }

// applyBatch applies keys in one transaction, as apply does, but answers
// the events it deferred with a *deferredError.
//
// A key given more than once (two jobs of one event: one worked again
// after a crash while the event's hand-off job waits too) is applied once,
// and every one of its callers gets its outcome. Answering the repeat nil
// would complete its job although the event failed; the hand-off of the
// event, unique by it, would then find that completed job and make none,
// leaving the event received with no job to work it.
func (a *applier) applyBatch(ctx context.Context, rc *river.Client[pgx.Tx], keys []inbox.Key) []error {
	first := make(map[inbox.Key]int, len(keys)) // position in unique
	unique := make([]inbox.Key, 0, len(keys))
	for _, k := range keys {
		if _, ok := first[k]; !ok {
			first[k] = len(unique)
			unique = append(unique, k)
		}
	}
	if len(unique) == len(keys) {
		return a.applyUnique(ctx, rc, keys)
	}
	outcomes := a.applyUnique(ctx, rc, unique)
	all := make([]error, len(keys))
	for i, k := range keys {
		all[i] = outcomes[first[k]]
	}
	return all
}

// applyUnique is applyBatch for keys that are all different.
func (a *applier) applyUnique(ctx context.Context, rc *river.Client[pgx.Tx], keys []inbox.Key) []error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	outcomes := make([]error, len(keys))
	live := make([]int, len(keys)) // positions in keys still in the batch
	for i := range live {
		live[i] = i
	}
	raced := 0
	for {
		batch := make([]inbox.Key, len(live))
		for i, k := range live {
			batch[i] = keys[k]
		}
		got, err := a.applyOnce(ctx, rc, batch)
		if err == nil {
			for i, k := range live {
				outcomes[k] = got[i]
			}
			return outcomes
		}
		if errors.Is(err, ledger.ErrPaymentCreatedMeanwhile) && raced < maxCreationRaces {
			// Another instance created a payment of the batch after it
			// was found new: the batch, applied again, finds it.
			raced++
			continue
		}
		var refused *refusedError
		if len(batch) > 1 && errors.As(err, &refused) {
			// The rest of the batch goes on without the event, which is
			// tried again alone (where its error is recorded).
			outcomes[live[refused.pos]] = errBatchFailed
			live = slices.Delete(live, refused.pos, refused.pos+1)
			continue
		}
		switch {
		case len(batch) > 1:
			err = errBatchFailed
		case isPermanentLedgerError(err):
			err = fmt.Errorf("%w: %w", ErrPermanent, err)
		}
		for _, k := range live {
			outcomes[k] = err
		}
		return outcomes
	}
}

// applyOnce applies keys in one transaction.
func (a *applier) applyOnce(ctx context.Context, rc *river.Client[pgx.Tx], keys []inbox.Key) ([]error, error) {
	start := time.Now()
	defer func() {
		a.sizes.Observe(float64(len(keys)))
		a.seconds.Observe(time.Since(start).Seconds())
	}()
	var outcomes []error
	claims := a.claims.begin()
	defer claims.release() // after the commit or the rollback
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		outcomes, err = a.applyTx(ctx, tx, rc, keys, claims)
		return err
	})
	return outcomes, err
}

// refusedError is an event of a batch that can never be applied, found
// while folding the batch, before anything was written. It wraps the
// event's error (which wraps ErrPermanent).
type refusedError struct {
	pos int // in the batch
	err error
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// paymentApply is one payment while a batch is folded into it.
type paymentApply struct {
	before  ledger.Payment // as locked, before the batch
	payment ledger.Payment
	facts   []statemachine.Fact
	known   map[string]bool // keys of facts
}

// batchWrites is what a batch writes, gathered while it is folded.
type batchWrites struct {
	postings []ledger.Transaction
	facts    []ledger.PaymentFact
	changes  []ledger.StateChange
	emails   []Email
	statuses []inbox.StatusUpdate
	refunds  []refund.Report
	messages []outbox.Message
	reports  []reconcile.ReportNotice
	// at is the time of the batch's changes: the payments' updated_at and
	// their messages' created_at.
	at time.Time
}

func (a *applier) applyTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], keys []inbox.Key, claims *claimSet) ([]error, error) {
	outcomes := make([]error, len(keys))
	stored, err := inbox.LockManyTx(ctx, tx, keys)
	if err != nil {
		return nil, err
	}

	type work struct {
		pos int // in keys
		ev  inbox.Event
		fx  Effects
	}
	var (
		todo   []work
		writes = batchWrites{at: time.Now()}
		seen   = make(map[inbox.Key]bool, len(keys))
	)
	for i, k := range keys {
		ev, ok := stored[k]
		switch {
		case !ok:
			outcomes[i] = fmt.Errorf("apply %s %s: %w", k.Provider, k.EventID, inbox.ErrNotFound)
			continue
		case seen[k] || done(ev.Status):
			// Applied already (a job run again after its completion was
			// lost), or set aside by an operator: only a replay, which
			// sets the event back to received, brings it back.
			continue
		}
		seen[k] = true
		fx, err := a.mappers.effectsOf(ev)
		switch {
		case errors.Is(err, provider.ErrIgnored):
			writes.statuses = append(writes.statuses, applied(ev, inbox.StatusIgnored))
		case err != nil:
			outcomes[i] = err
		default:
			todo = append(todo, work{i, ev, fx})
		}
	}

	// Leave out the events of payments another batch is applying: every
	// event of such a payment, so that the rest of it is not applied ahead
	// of them here.
	kept := todo[:0]
	for _, w := range todo {
		if w.fx.PaymentID != "" {
			if ok, released := claims.take(w.ev.Provider + "/" + w.fx.PaymentID); !ok {
				outcomes[w.pos] = &deferredError{released: released}
				continue
			}
		}
		kept = append(kept, w)
	}
	todo = kept

	var (
		payments = map[string]*paymentApply{}
		refs     []string
	)
	byProvider := map[string][]string{}
	for _, w := range todo {
		if w.fx.PaymentID != "" {
			byProvider[w.ev.Provider] = append(byProvider[w.ev.Provider], w.fx.PaymentID)
		}
		for _, t := range w.fx.Postings {
			refs = append(refs, t.Ref)
		}
	}
	for _, provider := range sortedKeys(byProvider) { // locks in one order: (provider, id)
		ps, facts, err := ledger.LockPaymentsWithFactsTx(ctx, tx, provider, byProvider[provider])
		if err != nil {
			return nil, err
		}
		for id, p := range ps {
			pa := &paymentApply{before: p, payment: p, facts: facts[id], known: make(map[string]bool, len(facts[id]))}
			for _, f := range pa.facts {
				pa.known[f.Key()] = true
			}
			payments[id] = pa
		}
	}
	posted, err := ledger.TransactionsByRefs(ctx, tx, refs)
	if err != nil {
		return nil, err
	}

	for _, w := range todo {
		if err := a.fold(w.ev, w.fx, payments[w.fx.PaymentID], posted, &writes); err != nil {
			return nil, &refusedError{pos: w.pos, err: fmt.Errorf("apply %s: %w", w.ev.EventID, err)}
		}
		for _, r := range w.fx.Reports {
			writes.reports = append(writes.reports, reconcile.ReportNotice{Provider: w.ev.Provider, FileName: r.FileName,
				URL: r.URL, Batch: r.Batch, EventID: w.ev.EventID})
		}
		writes.statuses = append(writes.statuses, applied(w.ev, inbox.StatusProcessed))
	}

	if _, err := ledger.PostManyTx(ctx, tx, writes.postings); err != nil {
		return nil, err
	}
	// The payments before their facts: a new one is created here, with
	// its summary.
	var touched []ledger.Payment
	for _, id := range sortedKeys(payments) {
		touched = append(touched, payments[id].payment)
	}
	if err := ledger.SavePaymentsTx(ctx, tx, touched, writes.changes); err != nil {
		return nil, err
	}
	if err := ledger.AddFactsManyTx(ctx, tx, writes.facts); err != nil {
		return nil, err
	}
	// Double charges, after the payments are written and under their
	// locks: only the references whose count of net captured payments
	// this batch may have changed.
	var charged []string
	for _, pa := range payments {
		charged = append(charged, chargedReferences(pa.before, pa.payment)...)
	}
	opened, err := ledger.DetectDoubleChargesTx(ctx, tx, charged)
	if err != nil {
		return nil, err
	}
	for _, d := range opened {
		writes.emails = append(writes.emails, doubleChargeAlert(d, a.opsEmail))
	}
	// The refund requests these reports settle, after their payments'
	// locks (the order every writer of a request takes them in).
	settled, err := refund.SettleTx(ctx, tx, writes.refunds)
	if err != nil {
		return nil, err
	}
	var failed []refund.Request
	for _, r := range settled {
		if r.State == refund.StateFailed {
			failed = append(failed, r)
		}
		m, err := outbox.RefundRequestMessage(r)
		if err != nil {
			return nil, err
		}
		writes.messages = append(writes.messages, m)
	}
	alerts, err := compensateTx(ctx, tx, a.opsEmail, failed, "provider")
	if err != nil {
		return nil, err
	}
	writes.emails = append(writes.emails, alerts...)
	if _, err := EnqueueEmailsTx(ctx, tx, rc, writes.emails); err != nil {
		return nil, err
	}
	if err := noteReportsTx(ctx, tx, rc, writes.reports); err != nil {
		return nil, err
	}
	if err := inbox.SetStatusManyTx(ctx, tx, writes.statuses); err != nil {
		return nil, err
	}
	// Last: placing them holds the feed's sequencer until the commit.
	if err := outbox.WritePlacedTx(ctx, tx, writes.messages); err != nil {
		return nil, err
	}
	return outcomes, nil
}

// fold applies one event's effects to its payment (nil for movements that
// belong to no payment) and gathers its writes, or refuses the event with
// an error wrapping ErrPermanent.
// posted holds the ledger's transactions by ref, those of this batch
// included.
func (a *applier) fold(ev inbox.Event, fx Effects, pa *paymentApply, posted map[string]ledger.Transaction, writes *batchWrites) error {
	var postings []ledger.Transaction
	for _, t := range fx.Postings {
		if stored, ok := posted[t.Ref]; ok {
			if err := ledger.CheckSameContent(stored, t); err != nil {
				return fmt.Errorf("%w: %w", ErrPermanent, err)
			}
			continue // the same movement, reported again
		}
		if slices.ContainsFunc(postings, func(p ledger.Transaction) bool { return p.Ref == t.Ref }) {
			continue
		}
		postings = append(postings, t)
	}
	if pa == nil {
		for _, t := range postings {
			posted[t.Ref] = t
		}
		writes.postings = append(writes.postings, postings...)
		return nil
	}

	p := pa.payment
	if p.Provider != ev.Provider {
		// Payment ids are unique across providers in practice (pi_…, ch_…,
		// Adyen's 16-character references); one that is not would merge
		// two providers' money into one payment.
		return fmt.Errorf("%w: payment %s belongs to provider %s, not %s", ErrPermanent, p.ID, p.Provider, ev.Provider)
	}
	var previous statemachine.State
	if len(pa.facts) > 0 {
		previous = p.State
	}
	var (
		added     []statemachine.Fact
		addedKeys []string
	)
	for _, f := range fx.Facts {
		if err := statemachine.CheckCurrency(pa.facts, f); err != nil {
			return fmt.Errorf("%w: %w", ErrPermanent, err)
		}
		key := f.Key()
		if pa.known[key] || slices.Contains(addedKeys, key) {
			continue // reported before: a duplicate changes nothing
		}
		added, addedKeys = append(added, f), append(addedKeys, key)
	}
	all := append(slices.Clip(pa.facts), added...)
	p.Summary = statemachine.Fold(all)
	emailLearnt := fx.ReceiptEmailKnown && (!p.ReceiptEmailKnown || (p.ReceiptEmail == "" && fx.ReceiptEmail != ""))
	if emailLearnt {
		p.ReceiptEmail, p.ReceiptEmailKnown = fx.ReceiptEmail, true
	}
	p.Details = p.Details.Merge(fx.Details)
	if previous != "" {
		if err := statemachine.CheckTransition(previous, p.State, lastKind(fx.Facts)); err != nil {
			return fmt.Errorf("%w: %w", ErrPermanent, err)
		}
	}

	// Accepted: from here on, the event is part of the batch.
	for _, t := range postings {
		posted[t.Ref] = t
	}
	for _, r := range fx.Refunds {
		writes.refunds = append(writes.refunds, refund.Report{Provider: ev.Provider, Reference: r.Reference,
			ProviderRefundID: r.ProviderRefundID, Succeeded: r.Succeeded, FailureReason: r.FailureReason})
	}
	writes.postings = append(writes.postings, postings...)
	for i, f := range added {
		pa.known[addedKeys[i]] = true
		writes.facts = append(writes.facts, ledger.PaymentFact{PaymentID: p.ID, Fact: f})
	}
	if (previous == "" && len(all) > 0) || outbox.PaymentChanged(pa.payment.Summary, p.Summary) {
		// Downstream learns of every change, once: an event that changes
		// nothing (a duplicate, a fact already known) writes no message.
		p.MessageSequence++
		p.UpdatedAt = writes.at
		m, err := outbox.PaymentMessage(p, previous)
		if err != nil {
			return err
		}
		writes.messages = append(writes.messages, m)
	}
	pa.facts, pa.payment = all, p
	if previous != p.State {
		writes.changes = append(writes.changes, ledger.StateChange{PaymentID: p.ID, From: previous, To: p.State, EventID: ev.EventID})
	}
	if len(added) > 0 || emailLearnt {
		// Otherwise nothing is new: every email this payment calls for is
		// already enqueued.
		writes.emails = append(writes.emails, emailsFor(ev, p, added, all, a.opsEmail)...)
	}
	return nil
}

// emailsFor lists the email intents a payment's facts call for once added
// joined all. Customer emails are derived from the whole fact set once the
// payment's address is known (or known to be absent, then recorded as
// skipped), so a refund reported before the charge that names the address
// still gets its confirmation. The outbox is unique per (kind, object):
// however often and in whatever order the reports arrive, each intent is
// enqueued once.
func emailsFor(ev inbox.Event, p ledger.Payment, added, all []statemachine.Fact, opsEmail string) []Email {
	var emails []Email
	if p.ReceiptEmailKnown {
		if p.AmountCaptured.IsPositive() {
			emails = append(emails, Email{Kind: EmailPaymentReceipt, ObjectID: p.ID, PaymentID: p.ID,
				Recipient: p.ReceiptEmail, Amount: ledger.Format(p.AmountCaptured, p.Currency), Currency: p.Currency,
				Reference: p.Details.Reference})
		}
		failed := map[string]bool{}
		for _, f := range all {
			if f.Kind == statemachine.FactRefundFailed {
				failed[f.ObjectID] = true
			}
		}
		for _, f := range all {
			if f.Kind == statemachine.FactRefundSucceeded && !failed[f.ObjectID] {
				emails = append(emails, Email{Kind: EmailRefundConfirmation, ObjectID: f.ObjectID, PaymentID: p.ID,
					Recipient: p.ReceiptEmail, Amount: ledger.Format(f.Amount, f.Currency), Currency: f.Currency,
					Reference: p.Details.Reference})
			}
		}
	}
	for _, f := range added {
		if f.Kind == statemachine.FactDisputeOpened {
			alert := Email{Kind: EmailDisputeAlert, ObjectID: f.ObjectID, PaymentID: p.ID, Recipient: opsEmail,
				Provider: ev.Provider, EventID: ev.EventID, EventType: ev.Type}
			if p.Currency != "" {
				alert.Amount, alert.Currency = ledger.Format(p.Amount, p.Currency), p.Currency
			}
			emails = append(emails, alert)
		}
	}
	return emails
}

// doubleChargeAlert is the email to ops of a double charge's detection.
func doubleChargeAlert(d ledger.DoubleCharge, opsEmail string) Email {
	e := Email{Kind: EmailDoubleCharge, ObjectID: fmt.Sprintf("%s#%d", d.Reference, d.Detections),
		Recipient: opsEmail, Reference: d.Reference}
	for _, p := range d.Payments {
		e.Payments = append(e.Payments, EmailPayment{ID: p.ID, Provider: p.Provider, Status: string(p.Status),
			Currency: p.Currency, AmountCaptured: ledger.Format(p.AmountCaptured, p.Currency),
			AmountRefunded: ledger.Format(p.AmountRefunded, p.Currency)})
	}
	return e
}

// chargedReferences are the references whose double charge a payment's
// change from before to after may open or resolve: those it joined or left
// as a net captured payment (a capture, a refund, a reference learnt).
func chargedReferences(before, after ledger.Payment) []string {
	was, is := ledger.NetCaptured(before.Summary), ledger.NetCaptured(after.Summary)
	if was == is && before.Details.Reference == after.Details.Reference {
		return nil
	}
	var refs []string
	if was && before.Details.Reference != "" {
		refs = append(refs, before.Details.Reference)
	}
	if is && after.Details.Reference != "" {
		refs = append(refs, after.Details.Reference)
	}
	return refs
}

// done reports the statuses a job has nothing left to do for.
func done(s inbox.Status) bool {
	return s == inbox.StatusProcessed || s == inbox.StatusIgnored || s == inbox.StatusDiscarded
}

// applied is the status update of an event the batch applied or ignored;
// its row is locked, so its received_at locates it.
func applied(ev inbox.Event, s inbox.Status) inbox.StatusUpdate {
	return inbox.StatusUpdate{Key: inbox.Key{Provider: ev.Provider, EventID: ev.EventID}, Status: s, Attempt: true,
		ReceivedAt: ev.ReceivedAt}
}

func lastKind(facts []statemachine.Fact) statemachine.FactKind {
	if len(facts) == 0 {
		return ""
	}
	return facts[len(facts)-1].Kind
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
