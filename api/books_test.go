package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/ledger"
)

func (b *opsBundle) post(t *testing.T, txn ledger.Transaction) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		_, err := ledger.PostTx(context.Background(), tx, txn)
		return err
	}))
}

func booksBundle(t *testing.T) *opsBundle {
	t.Helper()
	accounts, err := ledger.ParseGLAccounts("sales=4000,provider_balance=1200")
	require.NoError(t, err)
	b := setupOps(t, func(c *api.Config) {
		c.GLAccounts = accounts
		c.FinanceTokens = []string{"alice:" + financeTok}
	})
	at := func(month time.Month, day int) time.Time { return time.Date(2026, month, day, 9, 0, 0, 0, time.UTC) }
	b.post(t, ledger.NewCapture("stripe:capture:ch_1", "pi_1", "evt_1", "usd", decimal.RequireFromString("100.00"), at(2, 3)))
	b.post(t, ledger.NewFee("stripe:fee:txn_1", "pi_1", "evt_1", "usd", decimal.RequireFromString("3.20"), at(2, 3)))
	b.post(t, ledger.NewCapture("stripe:capture:ch_2", "pi_2", "evt_2", "usd", decimal.RequireFromString("50.00"), at(3, 9)))
	return b
}

func TestTrialBalanceAsOf(t *testing.T) {
	t.Parallel()
	b := booksBundle(t)
	rec := b.do(t, http.MethodGet, "/v1/ledger/trial-balance?as_of=2026-02-28T23:59:59.999999Z", financeTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var tb api.TrialBalanceView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &tb))
	require.Equal(t, "103.20", tb.Currencies[0].Debits)
	require.Equal(t, time.Date(2026, 2, 28, 23, 59, 59, 999999000, time.UTC), *tb.AsOf)

	rec = b.do(t, http.MethodGet, "/v1/ledger/trial-balance?as_of=2026-03-09T09:00:00%2B00:00", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `"debits": "153.20"`, "inclusive: posted at that instant")

	rec = b.do(t, http.MethodGet, "/v1/ledger/trial-balance", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.NotContains(t, rec.Body.String(), "as_of")

	rec = b.do(t, http.MethodGet, "/v1/ledger/trial-balance?as_of=2026-03-09", opsTok, "", "")
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, rec.Body.String(), "as_of must be an RFC 3339 instant")
}

func TestCloseAPeriod(t *testing.T) {
	t.Parallel()
	b := booksBundle(t)

	rec := b.do(t, http.MethodPost, "/v1/ledger/periods/2026-03/close", financeTok, "close-mar", "")
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "close 2026-02 before 2026-03")

	rec = b.do(t, http.MethodPost, "/v1/ledger/periods/2026-02/close", opsTok, "close-feb", "")
	require.Equal(t, http.StatusForbidden, rec.Code, "closing is finance's")

	rec = b.do(t, http.MethodPost, "/v1/ledger/periods/2026-02/close", financeTok, "close-feb", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var closed api.PeriodView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &closed))
	require.Equal(t, "2026-02", closed.Period)
	require.Equal(t, "closed", closed.Status)
	require.NotNil(t, closed.ClosedAt)
	require.Equal(t, "alice", *closed.ClosedBy, "the finance token's name")
	require.Equal(t, "103.20", closed.TrialBalance.Currencies[0].Debits)
	// The digest is documented: recompute it from the answer.
	var rendering strings.Builder
	rendering.WriteString("period,2026-02\n")
	for _, a := range []api.AccountBalanceView{closed.TrialBalance.Accounts[2], closed.TrialBalance.Accounts[0]} { // fees, provider_balance
		rendering.WriteString(a.Currency + "," + string(a.Account) + "," + a.Debits + "," + a.Credits + "\n")
	}
	rendering.WriteString("usd,sales,0.00,100.00\n")
	sum := sha256.Sum256([]byte(rendering.String()))
	require.Equal(t, hexOf(sum[:]), *closed.Digest)

	// Another key: closing twice answers the first close.
	rec = b.do(t, http.MethodPost, "/v1/ledger/periods/2026-02/close", financeTok, "close-feb-again", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var again api.PeriodView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &again))
	require.Equal(t, closed.ClosedAt, again.ClosedAt)
	require.Equal(t, *closed.Digest, *again.Digest)
	// The same key: the stored answer.
	rec = b.do(t, http.MethodPost, "/v1/ledger/periods/2026-02/close", financeTok, "close-feb", "")
	require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed))
	// The close is in the audit log, once: who, the month, the digest.
	var actor, reason string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT actor, reason FROM ops_audit_log
		WHERE action = 'period_close' AND provider = 'ledger' AND event_id = '2026-02'`).Scan(&actor, &reason))
	require.Equal(t, "alice", actor)
	require.Contains(t, reason, *closed.Digest)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM ops_audit_log WHERE action = 'period_close'`))

	current := time.Now().UTC().Format("2006-01")
	rec = b.do(t, http.MethodPost, "/v1/ledger/periods/"+current+"/close", financeTok, "close-current", "")
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Contains(t, rec.Body.String(), "has not ended")
	for _, bad := range []string{"2026-2", "2026-13", "march"} {
		rec = b.do(t, http.MethodPost, "/v1/ledger/periods/"+bad+"/close", financeTok, "close-"+bad, "")
		require.Equal(t, http.StatusBadRequest, rec.Code, bad)
		require.Contains(t, rec.Body.String(), "YYYY-MM", bad)
	}

	// A late movement of February lands in March.
	b.post(t, ledger.NewRefund("stripe:refund:re_1", "pi_1", "evt_3", "usd", decimal.RequireFromString("10.00"),
		time.Date(2026, 2, 20, 0, 0, 0, 0, time.UTC)))

	rec = b.do(t, http.MethodGet, "/v1/ledger/periods/2026-02", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var stored api.PeriodView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &stored))
	require.Equal(t, closed.TrialBalance, stored.TrialBalance, "the closed balance never moves")

	rec = b.do(t, http.MethodGet, "/v1/ledger/periods/2026-03", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var march api.PeriodView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &march))
	require.Equal(t, "open", march.Status)
	require.True(t, march.Closable)
	require.Nil(t, march.Digest)
	require.Equal(t, "163.20", march.TrialBalance.Currencies[0].Debits, "March's balance holds the late refund")
	require.Equal(t, api.AccountBalanceView{Account: ledger.AccountRefunds, Currency: "usd", Debits: "10.00", Credits: "0.00", Balance: "10.00"}, march.TrialBalance.Accounts[2])

	rec = b.do(t, http.MethodGet, "/v1/ledger/periods/2999-01", opsTok, "", "")
	require.Equal(t, http.StatusNotFound, rec.Code)

	rec = b.do(t, http.MethodGet, "/v1/ledger/periods", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var list api.PeriodList
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
	require.Equal(t, current, list.Periods[0].Period, "newest first, up to the current month")
	last := list.Periods[len(list.Periods)-1]
	require.Equal(t, "2026-02", last.Period)
	require.Equal(t, "closed", last.Status)
	require.Nil(t, last.TrialBalance, "the list leaves the balances out")
	require.True(t, list.Periods[len(list.Periods)-2].Closable, "March is next")
}

func TestJournalExports(t *testing.T) {
	t.Parallel()
	b := booksBundle(t)

	worldtest.LearnReference(t, b.pool, "pi_2", "ord-1042")
	rec := b.do(t, http.MethodGet, "/v1/ledger/journal.csv?from=2026-02-01&to=2026-03-31", financeTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "text/csv; charset=utf-8", rec.Header().Get("Content-Type"))
	require.Contains(t, rec.Header().Get("Content-Disposition"), "paygate-journal-2026-02-01-2026-03-31-generic-day.csv")
	require.Equal(t, "date,journal,account,account_code,currency,debit,credit,description\n"+
		"2026-02-03,PG-20260203-USD,provider_balance,1200,usd,96.80,,paygate usd 2026-02-03\n"+
		"2026-02-03,PG-20260203-USD,sales,4000,usd,,100.00,paygate usd 2026-02-03\n"+
		"2026-02-03,PG-20260203-USD,fees,fees,usd,3.20,,paygate usd 2026-02-03\n"+
		"2026-03-09,PG-20260309-USD,provider_balance,1200,usd,50.00,,paygate usd 2026-03-09\n"+
		"2026-03-09,PG-20260309-USD,sales,4000,usd,,50.00,paygate usd 2026-03-09\n", rec.Body.String())

	rec = b.do(t, http.MethodGet, "/v1/ledger/journal.csv?from=2026-03-09&to=2026-03-09&format=xero&granularity=transaction&currency=usd", financeTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "Narration,Date,Description,AccountCode,TaxRate,Amount\n"+
		"PG-T3 capture stripe:capture:ch_2 payment pi_2 · order ord-1042,09 Mar 2026,provider_balance · order ord-1042,1200,Tax Exempt,50.00\n"+
		"PG-T3 capture stripe:capture:ch_2 payment pi_2 · order ord-1042,09 Mar 2026,sales · order ord-1042,4000,Tax Exempt,-50.00\n", rec.Body.String())
	rec = b.do(t, http.MethodGet, "/v1/ledger/journal.csv?from=2026-02-01&to=2026-03-31&format=quickbooks&granularity=transaction", financeTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "PG-T3,03/09/2026,1200,50.00,,capture stripe:capture:ch_2 payment pi_2 · order ord-1042\n")
	require.Contains(t, rec.Body.String(), "PG-T1,02/03/2026,1200,100.00,,capture stripe:capture:ch_1 payment pi_1\n", "a payment without a reference")
	rec = b.do(t, http.MethodGet, "/v1/ledger/journal.csv?from=2026-02-01&to=2026-03-31&granularity=transaction", financeTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "date,journal,account,account_code,currency,debit,credit,description,reference\n"+
		"2026-02-03,PG-T1,provider_balance,1200,usd,100.00,,capture stripe:capture:ch_1 payment pi_1,\n"+
		"2026-02-03,PG-T1,sales,4000,usd,,100.00,capture stripe:capture:ch_1 payment pi_1,\n"+
		"2026-02-03,PG-T2,fees,fees,usd,3.20,,fee stripe:fee:txn_1 payment pi_1,\n"+
		"2026-02-03,PG-T2,provider_balance,1200,usd,,3.20,fee stripe:fee:txn_1 payment pi_1,\n"+
		"2026-03-09,PG-T3,provider_balance,1200,usd,50.00,,capture stripe:capture:ch_2 payment pi_2,ord-1042\n"+
		"2026-03-09,PG-T3,sales,4000,usd,,50.00,capture stripe:capture:ch_2 payment pi_2,ord-1042\n", rec.Body.String())

	rec = b.do(t, http.MethodGet, "/v1/ledger/journal.csv?from=2026-02-01&to=2026-03-31", opsTok, "", "")
	require.Equal(t, http.StatusForbidden, rec.Code, "exports are finance's")
	for query, want := range map[string]string{
		"to=2026-03-31":                                   "from is required",
		"from=2026-02-01":                                 "to is required",
		"from=2026-02-30&to=2026-03-31":                   "from must be a UTC day",
		"from=2026-03-02&to=2026-03-01":                   "is before from",
		"from=2026-03-01&to=2026-03-31&format=sage":       "format must be one of generic, xero, quickbooks",
		"from=2026-03-01&to=2026-03-31&granularity=month": "granularity must be day or transaction",
		"from=2026-03-01&to=2026-03-31&currency=USD":      "currency must be a lowercase ISO 4217 code",
		"from=2026-03-01T00:00:00Z&to=2026-03-31":         "from must be a UTC day",
	} {
		rec := b.do(t, http.MethodGet, "/v1/ledger/journal.csv?"+query, financeTok, "", "")
		require.Equal(t, http.StatusBadRequest, rec.Code, query)
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), query)
		require.Contains(t, rec.Body.String(), want, query)
	}

	rec = b.do(t, http.MethodGet, "/v1/ledger/periods/2026-02/journal.csv", financeTok, "", "")
	require.Equal(t, http.StatusConflict, rec.Code)
	require.Contains(t, rec.Body.String(), "GET /v1/ledger/journal.csv?from=2026-02-01\\u0026to=2026-02-28")

	rec = b.do(t, http.MethodPost, "/v1/ledger/periods/2026-02/close", financeTok, "close-feb", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var bodies []string
	for i, query := range []string{"?format=quickbooks", "?format=quickbooks", "?format=xero", ""} {
		rec := b.do(t, http.MethodGet, "/v1/ledger/periods/2026-02/journal.csv"+query, financeTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		sum := sha256.Sum256(rec.Body.Bytes())
		require.Equal(t, "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":", rec.Header().Get("Repr-Digest"), query)
		require.Equal(t, rec.Body.Len(), atoi(t, rec.Header().Get("Content-Length")))
		bodies = append(bodies, rec.Body.String())
		if i == 0 {
			// Later postings of February are moved to March, and a
			// February payment learns its order: the frozen export is the
			// same bytes.
			b.post(t, ledger.NewFee("stripe:fee:late", "pi_1", "evt_9", "usd", decimal.RequireFromString("1.00"),
				time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC)))
			worldtest.LearnReference(t, b.pool, "pi_1", "ord-0999")
		}
	}
	require.Equal(t, bodies[0], bodies[1])
	require.True(t, strings.HasPrefix(bodies[0], "Journal No,Journal Date,Account Name,Debits,Credits,Description\n"+
		"PG-20260203-USD,02/03/2026,1200,96.80,,paygate usd 2026-02-03\n"))
	require.True(t, strings.HasPrefix(bodies[3], "date,journal,"), "generic by default")
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, x := range b {
		out = append(out, digits[x>>4], digits[x&15])
	}
	return string(out)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	d, err := decimal.NewFromString(s)
	require.NoError(t, err, s)
	return int(d.IntPart())
}
