package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
)

// TestBooksCurrencyConfig: PAYGATE_BOOKS_CURRENCY is usd unless set, read
// in either case, and a code paygate does not know stops the start with
// the variable named.
func TestBooksCurrencyConfig(t *testing.T) {
	t.Parallel()
	load := func(v string) (config, error) {
		return loadConfig(func(k string) string { return map[string]string{"PAYGATE_BOOKS_CURRENCY": v}[k] })
	}
	cfg, err := load("")
	require.NoError(t, err)
	require.Equal(t, "usd", cfg.BooksCurrency)
	for in, want := range map[string]string{"eur": "eur", "GBP": "gbp", " jpy ": "jpy"} {
		cfg, err = load(in)
		require.NoError(t, err, in)
		require.Equal(t, want, cfg.BooksCurrency, in)
	}
	for _, bad := range []string{"dollars", "xyz", "us", "usd,eur"} {
		_, err = load(bad)
		require.ErrorContains(t, err, "PAYGATE_BOOKS_CURRENCY must be the ISO 4217 code of a currency paygate knows", bad)
		require.ErrorContains(t, err, fmt.Sprintf("%q", bad))
	}
}

// TestLedgerExportInParts: `paygate ledger export --format xero` writes
// one part of at most 300 lines (--part, the first by default), in the
// books currency; a part past the last is a usage error naming how many
// there are. (Not parallel: it sets the environment.)
func TestLedgerExportInParts(t *testing.T) {
	pool, url := testdb.NewWithURL(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("PAYGATE_BOOKS_CURRENCY", "EUR")
	ctx := context.Background()
	var txs []ledger.Transaction
	for i := range 200 {
		txs = append(txs, ledger.NewCapture(fmt.Sprintf("stripe:capture:ch_%d", i), fmt.Sprintf("pi_%d", i), "evt", "eur",
			decimal.RequireFromString("12.00"), time.Date(2026, 2, 3, 9, 0, i, 0, time.UTC)))
	}
	txs = append(txs, ledger.NewCapture("stripe:capture:ch_usd", "pi_usd", "evt", "usd",
		decimal.RequireFromString("5.00"), time.Date(2026, 2, 3, 10, 0, 0, 0, time.UTC)))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ledger.PostManyTx(ctx, tx, txs)
		return err
	}))
	paygate := func(args ...string) (string, string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"ledger", "export", "--from", "2026-02-03", "--to", "2026-02-03",
			"--format", "xero", "--granularity", "transaction"}, args...), &out, &errOut)
		return out.String(), errOut.String(), err
	}
	first, logged, err := paygate()
	require.NoError(t, err)
	require.Equal(t, 301, strings.Count(first, "\n"), "the header and 150 journals of two lines")
	require.Contains(t, logged, `"parts":2`)
	require.Contains(t, logged, `"unconverted_movements":1`, "the capture in dollars is not in the books currency")
	second, _, err := paygate("--part", "2")
	require.NoError(t, err)
	require.Equal(t, 101, strings.Count(second, "\n"))
	require.NotContains(t, first+second, "5.00")
	_, _, err = paygate("--part", "3")
	var ue usageError
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, "the export has 2 part(s), so no part 3")
}

// TestReadmeBooksCurrencyExample: docs/finance.md's worked example of exports
// in one base currency is what paygate exports of the day `paygate demo`
// sends: the day's QuickBooks journal in dollars as written (its date put
// in), the count of movements left out as written, and the mugs' lines
// by transaction as written (ids aside).
func TestReadmeBooksCurrencyExample(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("../../docs/finance.md")
	require.NoError(t, err)
	section := string(guide)
	start := strings.Index(section, "### Exports in one base currency")
	require.GreaterOrEqual(t, start, 0)
	section = section[start:]
	section = section[:strings.Index(section, "**Mapping the accounts.**")]
	blocks := regexp.MustCompile("(?s)```csv\n(.*?)```").FindAllStringSubmatch(section, -1)
	require.Len(t, blocks, 2, "the day's journal, and the mugs' by transaction")
	unconverted := regexp.MustCompile("`Paygate-Unconverted-Movements: ([0-9]+)`").FindStringSubmatch(section)
	require.NotNil(t, unconverted)

	m := startMakeRun(t)
	out := m.demo(t)
	day := regexp.MustCompile(`a day at a shop, ([0-9]{4}-[0-9]{2}-[0-9]{2})`).FindStringSubmatch(out)
	require.NotNil(t, day, out)
	d, err := time.Parse(time.DateOnly, day[1])
	require.NoError(t, err)
	dated := strings.NewReplacer("YYYYMMDD", d.Format("20060102"), "MM/DD/YYYY", d.Format("01/02/2006"), "YYYY-MM-DD", d.Format(time.DateOnly))
	export := func(query string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v1/ledger/journal.csv?from=%s&to=%s&%s",
			m.srv.addr, day[1], day[1], query), nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+devDefaults(t)["PAYGATE_FINANCE_TOKENS"])
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))
		return res, string(body)
	}
	res, body := export("format=quickbooks")
	require.Equal(t, dated.Replace(blocks[0][1]), body, "docs/finance.md's day in dollars")
	require.Equal(t, unconverted[1], res.Header.Get("Paygate-Unconverted-Movements"))
	_, body = export("format=quickbooks&granularity=transaction")
	for _, line := range strings.Split(strings.TrimSpace(blocks[1][1]), "\n") {
		pattern := regexp.QuoteMeta(dated.Replace(line))
		pattern = strings.ReplaceAll(pattern, "…", `[A-Za-z0-9_]+`)
		require.Regexp(t, "(?m)^"+pattern+"$", body)
	}
}
