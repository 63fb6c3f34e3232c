package api_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/reconcile"
)

const consumerTok = "consumer-token-exceptions-tests"

// exceptionsBundle is the API over a completed run of 2026-03-14 with a
// matched capture, a capture Stripe booked for 100.50 and the ledger for
// 100.00, and a capture Stripe does not have.
type exceptionsBundle struct {
	*opsBundle
	run                          int64
	matched, mismatch, dropped   int64
	mismatchRef, mismatchPayment string
}

func setupExceptionsAPI(t *testing.T) *exceptionsBundle {
	t.Helper()
	b := &exceptionsBundle{opsBundle: setupOps(t, func(c *api.Config) {
		c.FinanceTokens = []string{"alice:" + financeTok}
		c.ConsumerTokens = []string{consumerTok}
	})}
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	for _, p := range []struct{ ref, payment, amount string }{
		{"stripe:charge:ch_1:capture", "pi_1", "40.00"},
		{"stripe:charge:ch_2:capture", "pi_2", "100.00"},
		{"stripe:charge:ch_3:capture", "pi_3", "15.00"},
	} {
		b.post(t, ledger.NewCapture(p.ref, p.payment, "evt_"+p.payment, "usd", decimal.RequireFromString(p.amount), at))
	}
	b.mismatchRef, b.mismatchPayment = "stripe:charge:ch_2:capture", "pi_2"
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO payments (id, provider, currency) VALUES
			('pi_1', 'stripe', 'usd'), ('pi_2', 'stripe', 'usd'), ('pi_3', 'stripe', 'usd')`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_runs (date, trigger, requested_by) VALUES ('2026-03-14', 'api', 'test')
			RETURNING id`).Scan(&b.run); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `INSERT INTO reconciliation_items
			(run_id, position, status, provider_txn_id, source_id, ref, type, reporting_category, currency, ledger_currency,
			 provider_amount, provider_fee, ledger_amount, payment_id)
			VALUES ($1, 0, 'matched', 'txn_1', 'ch_1', 'stripe:charge:ch_1:capture', 'charge', 'charge', 'usd', 'usd', 40, 1.46, 40, 'pi_1'),
			       ($1, 1, 'amount_mismatch', 'txn_2', 'ch_2', 'stripe:charge:ch_2:capture', 'charge', 'charge', 'usd', 'usd', 100.50, 3.20, 100, 'pi_2'),
			       ($1, 2, 'missing_at_provider', NULL, NULL, 'stripe:charge:ch_3:capture', 'capture', 'charge', 'usd', 'usd', NULL, NULL, 15, 'pi_3')
			RETURNING id`, b.run)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		b.matched, b.mismatch, b.dropped = ids[0], ids[1], ids[2]
		_, err = tx.Exec(ctx, `UPDATE reconciliation_runs SET status = 'completed', finished_at = now(),
			report = '{"summary": {"matched": 1, "amount_mismatch": 1, "missing_at_provider": 1}}' WHERE id = $1`, b.run)
		return err
	}))
	return b
}

func (b *exceptionsBundle) resolvePath(id int64) string {
	return fmt.Sprintf("/v1/reconciliation/items/%d/resolve", id)
}

func (b *exceptionsBundle) balance(t *testing.T, account ledger.Account) string {
	t.Helper()
	tb := decodeJSON[api.TrialBalanceView](t, b.do(t, http.MethodGet, "/v1/ledger/trial-balance", financeTok, "", ""))
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, c.Currency)
	}
	for _, a := range tb.Accounts {
		if a.Account == account && a.Currency == "usd" {
			return a.Balance
		}
	}
	return "none"
}

// TestResolveAnExceptionThroughTheAPI: finance resolves an exception with
// a note under an Idempotency-Key; the answer is the item with its
// resolution, a write-off moves the trial balance by the difference, the
// audit log says who did it and why, and the run's lists show it resolved.
func TestResolveAnExceptionThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupExceptionsAPI(t)
	run := decodeJSON[api.RunReportView](t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d", b.run), financeTok, "", ""))
	require.Equal(t, reconcile.ExceptionCounts{Open: 2, Resolved: 0}, run.Exceptions)
	require.Equal(t, []int64{b.matched, b.mismatch, b.dropped}, []int64{run.Items[0].ID, run.Items[1].ID, run.Items[2].ID})
	require.Equal(t, "pi_2", *run.Items[1].PaymentID)
	require.Nil(t, run.Items[1].Resolution)
	before := b.balance(t, ledger.AccountProviderBalance)
	require.Equal(t, "155.00", before)
	require.Equal(t, "none", b.balance(t, ledger.AccountReconciliationAdjustments))

	body := `{"resolution":"write_off","note":"Stripe booked 0.50 more: written off per FIN-7"}`
	rec := b.do(t, http.MethodPost, b.resolvePath(b.mismatch), financeTok, "resolve-1", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	it := decodeJSON[api.ItemView](t, rec)
	require.Equal(t, b.mismatch, it.ID)
	require.Equal(t, b.run, it.RunID)
	require.Equal(t, reconcile.ResolutionWriteOff, *it.Resolution)
	require.Equal(t, "Stripe booked 0.50 more: written off per FIN-7", *it.Note)
	require.Equal(t, "alice", *it.ResolvedBy)
	require.WithinDuration(t, time.Now(), *it.ResolvedAt, time.Minute)
	require.Equal(t, "reconciliation:write_off:"+b.mismatchRef, *it.AdjustmentRef)
	require.Equal(t, "155.50", b.balance(t, ledger.AccountProviderBalance), "the trial balance moves by the difference")
	require.Equal(t, "-0.50", b.balance(t, ledger.AccountReconciliationAdjustments))

	// The write-off is on the payment's ledger, one balanced adjustment.
	txs := decodeJSON[struct {
		Transactions []api.TransactionView `json:"transactions"`
	}](t, b.do(t, http.MethodGet, "/v1/payments/"+b.mismatchPayment+"/ledger", financeTok, "", ""))
	var adjustments []api.TransactionView
	for _, tx := range txs.Transactions {
		if tx.Kind == ledger.KindAdjustment {
			adjustments = append(adjustments, tx)
		}
	}
	require.Len(t, adjustments, 1)
	require.Equal(t, []api.EntryView{
		{Account: ledger.AccountProviderBalance, Debit: "0.50", Credit: "0"},
		{Account: ledger.AccountReconciliationAdjustments, Debit: "0", Credit: "0.50"},
	}, adjustments[0].Entries)

	// The same request again: the stored answer.
	rec = b.do(t, http.MethodPost, b.resolvePath(b.mismatch), financeTok, "resolve-1", body)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed))
	// The same resolution under another key: the first, as it stands.
	rec = b.do(t, http.MethodPost, b.resolvePath(b.mismatch), financeTok, "resolve-2", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Empty(t, rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, it.ResolvedAt.UTC(), decodeJSON[api.ItemView](t, rec).ResolvedAt.UTC())
	require.Equal(t, "155.50", b.balance(t, ledger.AccountProviderBalance), "posted once")
	// Another resolution: refused, the first stands.
	rec = b.do(t, http.MethodPost, b.resolvePath(b.mismatch), financeTok, "resolve-3",
		`{"resolution":"provider_error","note":"Stripe will correct it"}`)
	p := requireProblem(t, rec, http.StatusConflict)
	require.Equal(t, "Item already resolved", p.Title)
	require.Contains(t, p.Detail, "was resolved write_off by alice")

	// The audit log names who, what, why and under which key.
	audit := decodeJSON[api.AuditPage](t, b.do(t, http.MethodGet, "/v1/ops/audit", opsTok, "", ""))
	var mine []api.AuditEntryView
	for _, e := range audit.Entries {
		if e.Action == "reconciliation_resolve" {
			mine = append(mine, e)
		}
	}
	require.Len(t, mine, 1, "one resolution, one entry")
	require.Equal(t, "alice", mine[0].Actor)
	require.Equal(t, "stripe", *mine[0].Provider)
	require.Equal(t, fmt.Sprint(b.mismatch), *mine[0].EventID)
	require.Equal(t, "resolve-1", *mine[0].IdempotencyKey)
	require.Contains(t, *mine[0].Reason, "write_off of reconciliation item")
	require.Contains(t, *mine[0].Reason, "0.50 usd written off as reconciliation:write_off:"+b.mismatchRef)
	require.True(t, strings.HasSuffix(*mine[0].Reason, ": Stripe booked 0.50 more: written off per FIN-7"), *mine[0].Reason)

	// provider_error moves nothing.
	rec = b.do(t, http.MethodPost, b.resolvePath(b.dropped), financeTok, "resolve-4",
		`{"resolution":"provider_error","note":"Stripe support case 4711"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Nil(t, decodeJSON[api.ItemView](t, rec).AdjustmentRef)
	require.Equal(t, "155.50", b.balance(t, ledger.AccountProviderBalance))

	// The lists: open and resolved exceptions, one item, the counts, the CSV.
	page := decodeJSON[api.ItemPage](t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d/items?state=resolved", b.run), opsTok, "", ""))
	require.Len(t, page.Items, 2)
	page = decodeJSON[api.ItemPage](t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d/items?state=open", b.run), financeTok, "", ""))
	require.Empty(t, page.Items)
	rec = b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d/items?state=closed", b.run), financeTok, "", "")
	require.Contains(t, requireProblem(t, rec, http.StatusBadRequest).Detail, "state must be open")
	one := decodeJSON[api.ItemView](t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/items/%d", b.dropped), opsTok, "", ""))
	require.Equal(t, reconcile.ResolutionProviderError, *one.Resolution)
	run = decodeJSON[api.RunReportView](t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d", b.run), financeTok, "", ""))
	require.Equal(t, reconcile.ExceptionCounts{Open: 0, Resolved: 2}, run.Exceptions)
	rows, err := csv.NewReader(b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d/items.csv", b.run), financeTok, "", "").Body).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{fmt.Sprint(b.mismatch), fmt.Sprint(b.run), "pi_2", "write_off", "Stripe booked 0.50 more: written off per FIN-7", "alice"},
		rows[2][12:18])
}

// TestResolveRefusals: only finance resolves, under an Idempotency-Key,
// with a known resolution and a note; only exceptions are resolved.
func TestResolveRefusals(t *testing.T) {
	t.Parallel()
	b := setupExceptionsAPI(t)
	body := `{"resolution":"matched_manually","note":"matched by hand"}`
	path := b.resolvePath(b.mismatch)
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodPost, path, "", "k", body).Code)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, path, opsTok, "k", body).Code, "ops reads, finance resolves")
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, path, consumerTok, "k", body).Code)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/items/%d", b.mismatch), consumerTok, "", "").Code)
	require.Contains(t, requireProblem(t, b.do(t, http.MethodPost, path, financeTok, "", body), http.StatusBadRequest).Title, "Idempotency-Key")

	for name, c := range map[string]struct {
		body   string
		status int
		title  string
	}{
		"no note":        {`{"resolution":"write_off"}`, http.StatusBadRequest, "Invalid resolution"},
		"a blank note":   {`{"resolution":"write_off","note":"  "}`, http.StatusBadRequest, "Invalid resolution"},
		"a long note":    {`{"resolution":"write_off","note":"` + strings.Repeat("x", reconcile.MaxNoteLen+1) + `"}`, http.StatusBadRequest, "Invalid resolution"},
		"no resolution":  {`{"note":"why"}`, http.StatusBadRequest, "Invalid resolution"},
		"an unknown one": {`{"resolution":"ignore","note":"why"}`, http.StatusBadRequest, "Invalid resolution"},
		"an extra field": {`{"resolution":"write_off","note":"why","amount":"1.00"}`, http.StatusBadRequest, "Bad request"},
	} {
		rec := b.do(t, http.MethodPost, path, financeTok, "key-"+strings.ReplaceAll(name, " ", "-"), c.body)
		require.Equal(t, c.title, requireProblem(t, rec, c.status).Title, name)
	}
	p := requireProblem(t, b.do(t, http.MethodPost, b.resolvePath(b.matched), financeTok, "matched", body), http.StatusUnprocessableEntity)
	require.Equal(t, "Item is not an exception", p.Title)
	require.Contains(t, p.Detail, "is matched")
	requireProblem(t, b.do(t, http.MethodPost, b.resolvePath(b.dropped+100), financeTok, "unknown", body), http.StatusNotFound)
	requireProblem(t, b.do(t, http.MethodPost, "/v1/reconciliation/items/abc/resolve", financeTok, "abc", body), http.StatusNotFound)
	requireProblem(t, b.do(t, http.MethodGet, "/v1/reconciliation/items/0", financeTok, "", ""), http.StatusNotFound)

	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_resolutions`).Scan(&n))
	require.Zero(t, n, "nothing refused was recorded")
	require.Equal(t, "none", b.balance(t, ledger.AccountReconciliationAdjustments))
}
