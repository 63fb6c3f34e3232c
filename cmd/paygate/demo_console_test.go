package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/demo"
)

// screenshotsEnv names the directory the console tour saves its pages to
// (docs/console for the console tour's pictures); unset, none is saved.
const screenshotsEnv = "PAYGATE_TOUR_SCREENSHOTS"

// startChromium starts Debian's Chromium headless at a width the tour's
// pictures read well at. A failed test leaves a screenshot under tmp/.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not on PATH: run scripts/chromium.sh (installs Debian's chromium) first")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1400, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(bctx), "start chromium")
	ctx, cancelTimeout := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	t.Cleanup(func() {
		if t.Failed() {
			saveScreenshot(t, bctx, filepath.Join("..", "..", "tmp"), strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), true)
		}
	})
	return ctx
}

// saveScreenshot saves the window's view of the page as dir/name.png, or
// the whole page with full.
func saveScreenshot(t *testing.T, ctx context.Context, dir, name string, full bool) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	capture := chromedp.CaptureScreenshot()
	if full {
		capture = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(sctx, capture)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	}
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
	}
}

func browse(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// consoleTour walks the "Console tour" (the README's, and step by step
// docs/operations.md's) after one `paygate demo` (whose output is
// demoOut) on a fresh make run, and checks that each page
// shows what the tour says it shows. With PAYGATE_TOUR_SCREENSHOTS set
// (docs/console, from the module root) it saves the tour's pictures.
func consoleTour(t *testing.T, m *makeRun, demoOut string) {
	ctx := startChromium(t)
	base := "http://" + m.srv.addr
	shots := os.Getenv(screenshotsEnv)
	if shots != "" && !filepath.IsAbs(shots) {
		shots = filepath.Join("..", "..", shots)
	}
	shot := func(name string) {
		if shots != "" {
			saveScreenshot(t, ctx, shots, name, false)
		}
	}
	signIn := func(token string) {
		browse(t, ctx,
			chromedp.Navigate(base+"/console/"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), token),
			chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("nav.main")),
		)
	}
	column := func(table string, n int) []string {
		return js[[]string](t, ctx, fmt.Sprintf(`[...document.querySelectorAll('%s tbody tr')].map(r => r.cells[%d].innerText.trim())`, table, n))
	}
	signIn(devOpsToken)

	// 1. Payments.
	browse(t, ctx, chromedp.Navigate(base+"/console/payments"), chromedp.WaitVisible(chromedp.CSS("#payments")))
	ids, statuses, amounts, currencies := column("#payments", 0), column("#payments", 1), column("#payments", 2), column("#payments", 3)
	require.Len(t, ids, 19, "the day's 19 payments")
	perProvider := map[string]map[string]bool{}
	for i, id := range ids {
		provider := id[strings.LastIndex(id, "\n")+1:]
		if perProvider[provider] == nil {
			perProvider[provider] = map[string]bool{}
		}
		perProvider[provider][currencies[i]] = true
	}
	require.Equal(t, map[string]map[string]bool{
		"stripe": {"usd": true, "eur": true, "gbp": true, "jpy": true},
		"adyen":  {"eur": true, "gbp": true, "sek": true},
	}, perProvider)
	count := map[string]int{}
	for _, st := range statuses {
		count[st]++
	}
	require.Equal(t, map[string]int{"succeeded": 11, "partially_refunded": 3, "refunded": 1, "disputed": 1, "canceled": 1, "failed": 2}, count)
	for _, a := range []string{"$1,299.00", "€45.00", "¥500", "499.00 SEK"} {
		require.Contains(t, amounts, a)
	}
	require.Equal(t, "$1,299.00", amounts[slices.Index(statuses, "disputed")])
	shot("payments")

	// 2. A payment: the refunded one, then one in euros.
	browse(t, ctx, chromedp.Navigate(base+"/console/payments?status=refunded"), chromedp.WaitVisible(chromedp.CSS("#payments")),
		chromedp.Click(chromedp.CSS("#payments a.id")), chromedp.WaitVisible(chromedp.CSS("#payment-status")))
	require.Equal(t, "refunded", textIn(t, ctx, "#payment-status"))
	require.Regexp(t, `succeeded\s*→\s*refunded`, textIn(t, ctx, ".timeline"))
	require.ElementsMatch(t, []string{"payment_receipt", "refund_confirmation"}, column("#emails", 0))
	require.Equal(t, []string{"sent", "sent"}, column("#emails", 3))
	require.Equal(t, []string{"capture", "fee", "refund"}, js[[]string](t, ctx, `[...document.querySelectorAll('#ledger .txn-head .badge')].map(b => b.innerText.trim())`))
	require.Equal(t, 1, js[int](t, ctx, `document.querySelectorAll('.refund-row[data-state="succeeded"]').length`))
	require.Regexp(t, `^re_`, column("#refund-requests", 6)[0], "Stripe's refund id")
	shot("payment")
	euros := regexp.MustCompile(`refund +rr_\w+ 15\.00 eur of (pi_\w+) \(stripe\)`).FindStringSubmatch(demoOut)
	require.NotNil(t, euros, demoOut)
	browse(t, ctx, chromedp.Navigate(base+"/console/payments?id="+euros[1]), chromedp.WaitVisible(chromedp.CSS("#ledger")))
	require.Contains(t, textIn(t, ctx, "#ledger"), "rate 1.085")

	// 3. Reconciliation.
	runID := regexp.MustCompile(`reconciled run #(\d+)`).FindStringSubmatch(demoOut)
	require.NotNil(t, runID, demoOut)
	browse(t, ctx, chromedp.Navigate(base+"/console/reconciliation"), chromedp.WaitVisible(chromedp.CSS("#runs")))
	require.Equal(t, []string{"completed", "completed"}, js[[]string](t, ctx, `[...document.querySelectorAll('#runs tr.run-row')].map(r => r.dataset.status)`))
	require.Equal(t, []string{runID[1], "1"}, js[[]string](t, ctx, `[...document.querySelectorAll('#runs tr.run-row')].map(r => r.dataset.run)`))
	require.Contains(t, textIn(t, ctx, `#runs tr.run-row[data-run="1"]`), "no items")
	require.ElementsMatch(t, []string{"matched", "fee_posted"},
		js[[]string](t, ctx, `[...document.querySelectorAll('#runs tr.run-row[data-run="`+runID[1]+`"] [data-item-status]')].map(b => b.dataset.itemStatus)`))
	browse(t, ctx, chromedp.Navigate(base+"/console/reconciliation/runs/"+runID[1]), chromedp.WaitVisible(chromedp.CSS("#items")))
	require.Equal(t, "completed", textIn(t, ctx, "#run-status"))
	tiles := js[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('.tiles .tile')].map(t => [t.querySelector('span').innerText.trim().toLowerCase(), t.querySelector('strong').innerText.trim()]))`)
	for status, n := range tiles {
		if status != "matched" && status != "fee_posted" {
			require.Equal(t, "0", n, "%s: %v", status, tiles)
		}
	}
	require.NotEqual(t, "0", tiles["matched"])
	require.NotEqual(t, "0", tiles["fee_posted"])
	itemStatuses, types := column("#items", 0), column("#items", 4)
	require.Subset(t, []string{"matched", "fee_posted"}, itemStatuses)
	for _, typ := range []string{"charge", "refund", "adjustment", "fee"} {
		require.Contains(t, types, typ)
	}
	shot("run")

	// 4. Books.
	browse(t, ctx, chromedp.Navigate(base+"/console/books"), chromedp.WaitVisible(chromedp.CSS("#trial-balance")))
	require.Equal(t, []string{"eur", "gbp", "jpy", "sek", "usd"}, column("#trial-balance", 0))
	require.Equal(t, []string{"balanced", "balanced", "balanced", "balanced", "balanced"}, column("#trial-balance", 3))

	// 5. Downstream.
	browse(t, ctx, chromedp.Navigate(base+"/console/endpoints"), chromedp.WaitVisible(chromedp.CSS("#endpoints")))
	require.Equal(t, []string{"healthy"}, js[[]string](t, ctx, `[...document.querySelectorAll('#endpoints tr.endpoint-row')].map(r => r.dataset.health)`))
	require.Equal(t, m.world+demo.ReceiverPath, textIn(t, ctx, "#endpoints a.url"))
	browse(t, ctx, chromedp.Click(chromedp.CSS("#endpoints a.url")), chromedp.WaitVisible(chromedp.CSS("#deliveries")))
	delivered := js[[]string](t, ctx, `[...document.querySelectorAll('#deliveries tr.delivery-row')].map(r => r.dataset.status)`)
	require.NotEmpty(t, delivered)
	require.Subset(t, []string{"succeeded"}, delivered)

	// 6. Events.
	browse(t, ctx, chromedp.Navigate(base+"/console/events"), chromedp.WaitVisible(chromedp.CSS("#events")))
	events := js[[]string](t, ctx, `[...document.querySelectorAll('#events tr.event-row')].map(r => r.cells[1].innerText.trim() + " " + r.dataset.status)`)
	require.NotEmpty(t, events)
	for _, ev := range events {
		typ, status, _ := strings.Cut(ev, " ")
		if typ == "customer.created" {
			require.Equal(t, "ignored", status, "the shop's new Customers: a type paygate does not use")
		} else {
			require.Equal(t, "processed", status, typ)
		}
	}

	// Finance: the same payments, read-only, the reconciliation and the books.
	browse(t, ctx, chromedp.Click(chromedp.CSS("form.who button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn(devFinanceToken)
	nav := textIn(t, ctx, "nav.main")
	for _, page := range []string{"Payments", "Reconciliation", "Books"} {
		require.Contains(t, nav, page)
	}
	require.NotContains(t, nav, "Downstream")
	browse(t, ctx, chromedp.Navigate(base+"/console/payments?id="+euros[1]), chromedp.WaitVisible(chromedp.CSS("#payment-status")))
	require.Zero(t, js[int](t, ctx, `document.querySelectorAll('#refund-form').length`), "no Refund form for finance")
}

func textIn(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	browse(t, ctx, chromedp.WaitVisible(chromedp.CSS(sel)))
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return strings.TrimSpace(s)
}
