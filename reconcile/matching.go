package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/ledger"
)

// A run's work is set-based, so that it costs the same number of queries,
// transactions and provider requests however many records the day holds:
// every ref the provider's records need is read in one query per
// lookupChunk refs, every fee and conversion the ledger lacks is posted in
// one transaction per postChunk postings, and the ledger's unclaimed
// transactions are looked for in lists rather than one provider request
// each. The chunks keep each statement's size bounded on a large day.
const (
	lookupChunk = 1000
	postChunk   = 500
)

// DefaultTimingWindow is how far past the day's edges a run lists the
// provider's records to find those of ledger transactions the day's
// records did not claim: the provider and the ledger date a movement
// seconds apart (a payout created before midnight and booked after it).
const DefaultTimingWindow = time.Hour

// matching is one run's view of the ledger while it walks the provider's
// records.
type matching struct {
	r        *Runner
	postedBy string                         // the mark on the fees this run posts
	byRef    map[string]*ledger.Transaction // the day's, and every ref looked up since
	missing  map[string]bool                // refs looked up and not in the ledger
	claimed  map[string]bool                // refs a provider record of the day matched
}

func newMatching(r *Runner, runID int64, ledgerDay []ledger.Transaction) *matching {
	m := &matching{r: r, postedBy: PostedBy(runID), byRef: make(map[string]*ledger.Transaction, len(ledgerDay)),
		missing: map[string]bool{}, claimed: map[string]bool{}}
	for i := range ledgerDay {
		m.byRef[ledgerDay[i].Ref] = &ledgerDay[i]
	}
	return m
}

// load reads the refs not known yet, wherever the ledger dated them.
func (m *matching) load(ctx context.Context, refs []string) error {
	var unknown []string
	seen := map[string]bool{}
	for _, ref := range refs {
		if ref == "" || seen[ref] || m.missing[ref] {
			continue
		}
		if _, ok := m.byRef[ref]; ok {
			continue
		}
		seen[ref] = true
		unknown = append(unknown, ref)
	}
	return m.read(ctx, unknown)
}

// read reads refs from the ledger, known or not: after posting, what the
// ledger holds is what the items compare with.
func (m *matching) read(ctx context.Context, refs []string) error {
	for chunk := range slices.Chunk(refs, lookupChunk) {
		got, err := ledger.TransactionsByRefs(ctx, m.r.cfg.Pool, chunk)
		if err != nil {
			return err
		}
		for _, ref := range chunk {
			tx, ok := got[ref]
			if !ok {
				m.missing[ref] = true
				continue
			}
			delete(m.missing, ref)
			m.byRef[ref] = &tx
		}
	}
	return nil
}

// step is one line of a provider record and what the run does with it.
type step struct {
	line Line
	tx   *ledger.Transaction // the ledger's transaction under the line's ref before the run posted anything
	// post is the posting of a line the ledger lacks and learns from the
	// statement (a fee, a batch's payout); legs the conversion of a
	// movement settled in another currency (its presentment leg, then its
	// settlement leg), moved the movement as the ledger posted it.
	post  *ledger.Transaction
	legs  *[2]ledger.Transaction
	moved *ledger.Transaction
}

// records matches the provider's records, in order, each with its lines,
// posting the fees, payouts and conversions the ledger lacks. It returns
// one item per line, in the order of the lines.
func (m *matching) records(ctx context.Context, lines [][]Line) ([]Item, error) {
	var refs []string
	for _, ls := range lines {
		for _, l := range ls {
			refs = append(refs, l.Ref)
		}
	}
	if err := m.load(ctx, refs); err != nil {
		return nil, err
	}

	var (
		steps   []step
		legRefs []string
	)
	for _, ls := range lines {
		paymentID := ""
		for _, l := range ls {
			bt := l.BT
			s := step{line: l}
			if l.Ref != "" {
				s.tx = m.byRef[l.Ref]
			}
			if s.tx != nil {
				m.claimed[l.Ref] = true
				if !l.Post {
					paymentID = s.tx.PaymentID
				}
			}
			switch {
			case s.tx == nil && l.Post && l.Ref != "" && l.Amount != 0:
				post := Posting(l, paymentID, m.postedBy)
				s.post = &post
				m.claimed[l.Ref] = true
			case s.tx != nil && !l.Post && l.Conversion != "" && s.tx.Currency != bt.Currency && bt.ExchangeRate.Valid:
				legs := m.settlement(l, s.tx)
				s.legs, s.moved = &legs, s.tx
				for _, leg := range legs {
					legRefs = append(legRefs, leg.Ref)
					m.claimed[leg.Ref] = true
				}
			}
			steps = append(steps, s)
		}
	}
	if err := m.load(ctx, legRefs); err != nil {
		return nil, err
	}

	var groups [][]ledger.Transaction
	for _, s := range steps {
		switch {
		case s.post != nil:
			groups = append(groups, []ledger.Transaction{*s.post})
		case s.legs != nil && (m.byRef[s.legs[0].Ref] == nil || m.byRef[s.legs[1].Ref] == nil):
			groups = append(groups, s.legs[:])
		}
	}
	created, err := m.post(ctx, groups)
	if err != nil {
		return nil, err
	}

	items := make([]Item, 0, len(steps))
	for _, s := range steps {
		it, err := m.item(s, created)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

// settlement is the ledger's conversion of moved into the settlement
// currency of the line's record (ledger.NewSettlement, refs the line's
// Conversion followed by the currency), at the rate the provider reports.
func (m *matching) settlement(l Line, moved *ledger.Transaction) [2]ledger.Transaction {
	bt := l.BT
	legRef := func(currency string) string { return l.Conversion + currency }
	presented := ledger.Money{Amount: Effect(*moved), Currency: moved.Currency}
	return ledger.NewSettlement(legRef, moved.PaymentID, m.postedBy, presented,
		ledger.Money{Amount: money(l.Amount, bt.Currency), Currency: bt.Currency}, bt.ExchangeRate.Decimal, bt.Created)
}

// post posts groups (a fee, or the two legs of a conversion, each posted
// whole or not at all) in a few transactions, then reads back what the
// ledger holds under their refs. created names the refs this call posted.
//
// A ref already posted with other content (a concurrent run, or another
// poster) leaves its group out: the run goes on, and the item compares with
// what the ledger holds.
func (m *matching) post(ctx context.Context, groups [][]ledger.Transaction) (map[string]bool, error) {
	created := map[string]bool{}
	var refs []string
	for start := 0; start < len(groups); {
		end, n := start, 0
		for end < len(groups) && (n == 0 || n+len(groups[end]) <= postChunk) {
			n += len(groups[end])
			end++
		}
		chunk := groups[start:end]
		start = end
		for len(chunk) > 0 {
			var ts []ledger.Transaction
			for _, g := range chunk {
				ts = append(ts, g...)
			}
			var got []bool
			err := pgx.BeginFunc(ctx, m.r.cfg.Pool, func(tx pgx.Tx) error {
				var err error
				got, err = ledger.PostManyTx(ctx, tx, ts)
				return err
			})
			var conflict *ledger.RefConflictError
			if errors.As(err, &conflict) {
				kept := slices.DeleteFunc(slices.Clone(chunk), func(g []ledger.Transaction) bool {
					return slices.ContainsFunc(g, func(t ledger.Transaction) bool { return t.Ref == conflict.Ref })
				})
				if len(kept) == len(chunk) {
					return nil, fmt.Errorf("post %d fees and conversions: %w", len(ts), err)
				}
				refs = append(refs, conflict.Ref)
				chunk = kept
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("post %d fees and conversions: %w", len(ts), err)
			}
			for i, c := range got {
				refs = append(refs, ts[i].Ref)
				if c {
					created[ts[i].Ref] = true
				}
			}
			break
		}
	}
	if err := m.read(ctx, refs); err != nil {
		return nil, fmt.Errorf("read posted fees and conversions: %w", err)
	}
	return created, nil
}

// item judges one step against what the ledger holds now.
func (m *matching) item(s step, created map[string]bool) (Item, error) {
	l := s.line
	switch {
	case s.post != nil:
		stored := m.byRef[l.Ref]
		if stored == nil {
			return Item{}, fmt.Errorf("read posting %s: %w", l.Ref, ledger.ErrNotFound)
		}
		it := Compare(l, stored)
		if l.fee() && (created[l.Ref] || stored.EventID == m.postedBy) && it.Status == StatusMatched {
			it.Status = StatusFeePosted
		}
		return it, nil
	case s.legs != nil:
		return m.settled(s)
	}
	it := Compare(l, s.tx)
	if l.fee() && s.tx != nil && s.tx.EventID == m.postedBy && it.Status == StatusMatched {
		it.Status = StatusFeePosted // by an earlier attempt of this run
	}
	return it, nil
}

// settled matches a movement the provider booked in another currency than
// the ledger posted it in: the item compares the provider's amount with the
// settlement leg, in the settlement currency, showing the presentment side
// and the rate beside it.
func (m *matching) settled(s step) (Item, error) {
	var stored [2]*ledger.Transaction
	for i, leg := range s.legs {
		if stored[i] = m.byRef[leg.Ref]; stored[i] == nil {
			return Item{}, fmt.Errorf("read settlement %s: %w", leg.Ref, ledger.ErrNotFound)
		}
	}
	l, moved := s.line, s.moved
	presented := Effect(*moved)
	it := Compare(l, stored[1])
	it.Ref = l.Ref
	it.PresentmentCurrency = moved.Currency
	it.PresentmentAmount = ptr(presented)
	rate := l.BT.ExchangeRate.Decimal
	it.ExchangeRate = &rate
	if it.Status == StatusMatched && !Effect(*stored[0]).Equal(presented.Neg()) {
		// The conversion stored earlier took another presentment amount
		// out of the balance than the movement put in.
		it.Status = StatusAmountMismatch
	}
	return it, nil
}

// elsewhere looks for the provider's records of ledger transactions of the
// day that no record of the day claimed, on whatever day the provider
// booked them. The day's records and those listed within the timing window
// past the day's edges answer most of them with a list or two; only a ref
// neither answers is looked up on its own (the provider's record of its
// source object, or its balance transaction), which a day with nothing
// missing at the provider never needs.
func (m *matching) elsewhere(ctx context.Context, pending []ledger.Transaction, day []BalanceTransaction, from, to time.Time) (map[string]BalanceTransaction, error) {
	found := map[string]BalanceTransaction{}
	if len(pending) == 0 {
		return found, nil
	}
	byLine, byID := map[string]BalanceTransaction{}, map[string]BalanceTransaction{}
	index := func(bts []BalanceTransaction) {
		for _, bt := range bts {
			byID[bt.ID] = bt
			for _, l := range m.r.cfg.Provider.Lines(bt) {
				if _, ok := byLine[l.Ref]; l.Ref != "" && !ok {
					byLine[l.Ref] = bt
				}
			}
		}
	}
	index(day)
	for _, w := range m.windows(pending, from, to) {
		m.r.cfg.Progress(fmt.Sprintf("listing the provider's balance transactions from %s to %s for %d unclaimed ledger transactions",
			w[0].Format(time.RFC3339), w[1].Format(time.RFC3339), len(pending)))
		bts, err := m.r.cfg.Provider.BalanceTransactions(ctx, w[0], w[1])
		if err != nil {
			return nil, err
		}
		index(bts)
	}
	for _, tx := range pending {
		source, txnID, ok := m.r.cfg.Provider.SourceOfRef(tx.Ref)
		if !ok {
			continue
		}
		if bt, ok := byLine[tx.Ref]; ok {
			found[tx.Ref] = bt
			continue
		}
		if bt, ok := byID[txnID]; ok && txnID != "" {
			// The record itself is known: the ref is either one of its
			// conversion's legs or nothing the provider has.
			if m.isLegOf(tx.Ref, bt) {
				found[tx.Ref] = bt
			}
			continue
		}
		bt, ok, err := m.atProvider(ctx, tx.Ref, source, txnID)
		if err != nil {
			return nil, err
		}
		if ok {
			found[tx.Ref] = bt
		}
	}
	return found, nil
}

// windows are the ranges past the day's edges, at most one on each side,
// within the timing window of the pending transactions' dates.
func (m *matching) windows(pending []ledger.Transaction, from, to time.Time) [][2]time.Time {
	w := m.r.cfg.TimingWindow
	if w <= 0 {
		return nil
	}
	lo, hi := pending[0].OccurredAt, pending[0].OccurredAt
	for _, tx := range pending[1:] {
		lo, hi = minTime(lo, tx.OccurredAt), maxTime(hi, tx.OccurredAt)
	}
	var out [][2]time.Time
	if start := lo.Add(-w); start.Before(from) {
		out = append(out, [2]time.Time{start.Truncate(time.Second), from})
	}
	// The provider's times are whole seconds and a range excludes its end.
	if end := hi.Add(w).Truncate(time.Second).Add(time.Second); end.After(to) {
		out = append(out, [2]time.Time{to, end})
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// atProvider asks the provider for the record of one ledger ref: by its
// balance transaction id, or by its source object's balance transactions.
func (m *matching) atProvider(ctx context.Context, ref, source, txnID string) (BalanceTransaction, bool, error) {
	var candidates []BalanceTransaction
	if txnID != "" {
		bt, found, err := m.r.cfg.Provider.BalanceTransaction(ctx, txnID)
		if err != nil || !found {
			return BalanceTransaction{}, false, err
		}
		candidates = []BalanceTransaction{bt}
	} else {
		var err error
		if candidates, err = m.r.cfg.Provider.BalanceTransactionsBySource(ctx, source); err != nil {
			return BalanceTransaction{}, false, err
		}
	}
	for _, bt := range candidates {
		if m.isLegOf(ref, bt) {
			return bt, true, nil // a leg of the record's conversion
		}
		for _, l := range m.r.cfg.Provider.Lines(bt) {
			if l.Ref == ref {
				return bt, true, nil
			}
		}
	}
	return BalanceTransaction{}, false, nil
}

// isLegOf reports whether ref names a leg of the conversion of one of bt's
// movements.
func (m *matching) isLegOf(ref string, bt BalanceTransaction) bool {
	for _, l := range m.r.cfg.Provider.Lines(bt) {
		if l.Conversion != "" && len(ref) > len(l.Conversion) && strings.HasPrefix(ref, l.Conversion) {
			return true
		}
	}
	return false
}
