package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/demo"
	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/mailpit"
	"github.com/paygate/paygate/internal/outbuf"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

// makeRun is a `make run` on a test database: the demo's shop started as
// scripts/dev-services.sh starts it, then paygate serve with run.sh's
// development values and dev-services' provider settings.
type makeRun struct {
	srv       *server
	world     string // the shop's URL: paygate's Stripe API
	worldProc *os.Process
	mail      *mailpit.Server
	env       []string
}

func startMakeRun(t *testing.T) *makeRun {
	t.Helper()
	_, dbURL := testdb.NewWithURL(t)
	return startMakeRunOn(t, dbURL, filepath.Join(t.TempDir(), "demo-world.jsonl"))
}

// startMakeRunOn is startMakeRun on the database at dbURL with the shop's
// journal at journal: a second checkout's make run on the same database
// (a journal of its own), or a checkout's make run on a new database (the
// journal it had).
func startMakeRunOn(t *testing.T, dbURL, journal string) *makeRun {
	t.Helper()
	paygateAddr, worldAddr := freeport.Addr(t), freeport.Addr(t)
	m := &makeRun{world: "http://" + worldAddr, mail: mailpit.Start(t)}
	for k, v := range devDefaults(t) {
		m.env = append(m.env, k+"="+v)
	}
	m.env = append(m.env, "PAYGATE_ADDR="+paygateAddr,
		"PAYGATE_SMTP_URL="+m.mail.SMTPURL(), "PAYGATE_EMAIL_FROM=paygate@localhost", "PAYGATE_OPS_EMAIL=ops@localhost",
		"PAYGATE_STRIPE_API_KEY="+devStripeAPIKey, "PAYGATE_STRIPE_API_URL="+m.world,
		"PAYGATE_ADYEN_API_KEY="+devAdyenAPIKey, "PAYGATE_ADYEN_MERCHANT_ACCOUNT="+devAdyenMerchant,
		"PAYGATE_ADYEN_CHECKOUT_URL="+m.world+"/checkout/v71")

	logs := &outbuf.Buffer{}
	world := exec.Command(paygateBinary(t), "demo", "serve", "--listen", worldAddr, "--journal", journal)
	world.Env = append(os.Environ(), m.env...)
	world.Stdout, world.Stderr = logs, logs
	require.NoError(t, world.Start())
	m.worldProc = world.Process
	done := make(chan struct{})
	go func() { _ = world.Wait(); close(done) }()
	t.Cleanup(func() { _ = world.Process.Kill(); <-done })
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodGet, m.world+"/demo", nil)
		req.Header.Set("Authorization", "Bearer "+devStripeAPIKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "the demo's shop never answered:\n%s", logs)

	m.srv = startServerAt(t, paygateAddr, dbURL, m.env...)
	return m
}

// stop stops paygate and the shop as stopping make run does, and waits
// until neither answers. The test's clean-up reaps them.
func (m *makeRun) stop(t *testing.T) {
	t.Helper()
	_ = m.srv.cmd.Process.Kill()
	_ = m.worldProc.Kill()
	require.Eventually(t, func() bool {
		for _, u := range []string{"http://" + m.srv.addr + "/readyz", m.world + "/demo"} {
			if res, err := http.Get(u); err == nil {
				res.Body.Close()
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "paygate and the shop stop")
}

// demo runs `paygate demo` as from a fresh shell: none of make run's
// environment but the two addresses that differ from its defaults.
func (m *makeRun) demo(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runDemo(t, []string{"PAYGATE_ADDR=" + m.srv.addr, "PAYGATE_STRIPE_API_URL=" + m.world}, args...)
	require.NoError(t, err, "paygate demo:\n%s\nserver:\n%s", out, m.srv.logs)
	return out
}

// runDemo runs `paygate demo args…` with env and none of the test's own
// PAYGATE_ settings.
func runDemo(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(paygateBinary(t), append([]string{"demo"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYGATE_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (m *makeRun) get(t *testing.T, token, path string, v any) {
	t.Helper()
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+m.srv.addr+path, token, v), path)
}

// post sends body to path (a token, and header pairs, when given) and
// requires status.
func (m *makeRun) post(t *testing.T, token, path, body string, status int, header ...string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+m.srv.addr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, status, res.StatusCode, "POST %s: %s", path, b)
	return b
}

type runView struct {
	ID      int64          `json:"id"`
	Date    *string        `json:"date"`
	Status  string         `json:"status"`
	Trigger string         `json:"trigger"`
	Summary map[string]int `json:"summary"`
	Items   []struct {
		Status              string  `json:"status"`
		Type                string  `json:"type"`
		Currency            string  `json:"currency"`
		PresentmentCurrency *string `json:"presentment_currency"`
	} `json:"items"`
}

// reconcileDay asks for a run of date as finance and waits for it.
func (m *makeRun) reconcileDay(t *testing.T, date string) runView {
	t.Helper()
	var run runView
	require.NoError(t, json.Unmarshal(m.post(t, devFinanceToken, "/v1/reconciliation/runs", fmt.Sprintf(`{"date":%q}`, date),
		http.StatusAccepted, "Idempotency-Key", "test-run-"+date+"-"+nonce()), &run))
	require.Eventually(t, func() bool {
		m.get(t, devFinanceToken, fmt.Sprintf("/v1/reconciliation/runs/%d?limit=500", run.ID), &run)
		return run.Status != "running"
	}, time.Minute, 100*time.Millisecond)
	return run
}

// exceptions are a run's items that are neither matched nor a fee the run
// booked.
func exceptions(summary map[string]int) map[string]int {
	out := map[string]int{}
	for st, n := range summary {
		if n > 0 && st != "matched" && st != "fee_posted" {
			out[st] = n
		}
	}
	return out
}

// TestDemoOnMakeRun: on `make run`'s setup the first screen is no longer an
// exception (the daily run paygate makes at start reads the demo's shop,
// not stripe-mock's fixtures), and `paygate demo` shows paygate working:
// the shop's day arrives through the real, signed webhook endpoints, its
// refunds go through paygate's saga and settle, its dispute is recorded,
// its endpoint gets every message, and a reconciliation of the day, and
// of today (the refunds), has only matched and fee items. A second run
// adds new payments and stays clean. Then the console tour (the README's,
// step by step in docs/operations.md) is checked in Chromium, item by item.
func TestDemoOnMakeRun(t *testing.T) {
	t.Parallel()
	// The day paygate reconciles at start is the one its schedule's last
	// tick was for: yesterday after 02:00 UTC, the day before between
	// midnight and 02:00. Read before and after the start, so that a tick
	// in between leaves either.
	schedule, err := jobs.ParseCron(defaultReconcileAt)
	require.NoError(t, err)
	scheduledBefore := jobs.ScheduledDay(schedule, time.Now()).Format(time.DateOnly)
	m := startMakeRun(t)
	yesterday := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1).Format(time.DateOnly)
	today := time.Now().UTC().Format(time.DateOnly)

	var runs struct {
		Runs []runView `json:"runs"`
	}
	require.Eventually(t, func() bool {
		m.get(t, devFinanceToken, "/v1/reconciliation/runs", &runs)
		return len(runs.Runs) == 1 && runs.Runs[0].Status != "running"
	}, time.Minute, 100*time.Millisecond, "paygate reconciles yesterday at start")
	first := runs.Runs[0]
	require.Equal(t, "scheduled", first.Trigger)
	require.Equal(t, "completed", first.Status)
	scheduledAfter := jobs.ScheduledDay(schedule, time.Now()).Format(time.DateOnly)
	require.Contains(t, []string{scheduledBefore, scheduledAfter}, *first.Date, "the day of the schedule's last tick")
	require.Empty(t, exceptions(first.Summary), "no exception on the first screen")

	out, err := runDemo(t, []string{"PAYGATE_ADDR=" + m.srv.addr, "PAYGATE_STRIPE_API_URL=http://" + freeport.Addr(t)})
	require.Error(t, err)
	require.Contains(t, out, "the demo's shop does not answer", "a demo without its shop says where it looked and what starts it")
	require.Contains(t, out, "make run starts it")

	out = m.demo(t)
	t.Logf("paygate demo:\n%s", out)
	require.Contains(t, out, "the books match the provider")
	require.Regexp(t, `stripe +\d+ events for 14 payments \(usd, eur, gbp, jpy\) to \S+/webhooks/stripe: \d+ accepted`, out)
	require.Regexp(t, `adyen +9 notifications for 5 payments \(eur, sek, gbp\) to \S+/webhooks/adyen: 9 accepted`, out)
	twice := requireDoubleCharge(t, m, out)

	// Emails as make run's mailpit shows them: a receipt per Stripe
	// payment with an email that succeeded, a confirmation per refund, the
	// dispute's alert to ops, the double charge's to ops, and no
	// reconciliation alert, ever.
	kinds := map[string]int{}
	countKinds := func() {
		clear(kinds)
		for _, msg := range m.mail.Messages(t) {
			kind, _, _ := strings.Cut(msg.MessageID, ".")
			kinds[kind]++
		}
	}
	require.Eventually(t, func() bool {
		countKinds()
		return kinds["payment_receipt"] == 12 && kinds["refund_confirmation"] == 3 && kinds["dispute_alert"] >= 1 &&
			kinds["double_charge"] == 1
	}, time.Minute, 100*time.Millisecond, "emails: %v", kinds)
	require.Zero(t, kinds["reconciliation_alert"])

	t.Run("console tour", func(t *testing.T) { consoleTour(t, m, out) })

	var stats opsStats
	m.get(t, devOpsToken, "/v1/ops/stats", &stats)
	require.Zero(t, stats.Events["poison"]+stats.Events["received"], "%v", stats.Events)

	var payments struct {
		Payments []struct {
			ID             string `json:"id"`
			Provider       string `json:"provider"`
			Status         string `json:"status"`
			Currency       string `json:"currency"`
			AmountDisputed string `json:"amount_disputed"`
		} `json:"payments"`
	}
	m.get(t, devOpsToken, "/v1/payments?limit=100", &payments)
	require.Len(t, payments.Payments, 19)
	statuses, currencies := map[string]int{}, map[string]bool{}
	for _, p := range payments.Payments {
		statuses[p.Provider+" "+p.Status]++
		currencies[p.Currency] = true
		if p.Status == "disputed" {
			require.Equal(t, "1299.00", p.AmountDisputed, "the dispute withdrew the charge")
		}
	}
	require.Equal(t, map[string]int{
		"stripe succeeded": 8, "stripe partially_refunded": 2, "stripe refunded": 1, "stripe disputed": 1,
		"stripe canceled": 1, "stripe failed": 1,
		"adyen succeeded": 3, "adyen partially_refunded": 1, "adyen failed": 1,
	}, statuses)
	require.Equal(t, map[string]bool{"usd": true, "eur": true, "gbp": true, "jpy": true, "sek": true}, currencies)

	requests := regexp.MustCompile(`refund +(rr_[0-9a-f]+) .*: succeeded, (stripe|adyen) refund`).FindAllStringSubmatch(out, -1)
	require.Len(t, requests, 3, "two Stripe refunds and an Adyen one, each settled by the provider's webhook")
	for _, r := range requests {
		var req struct {
			State string `json:"state"`
		}
		m.get(t, devOpsToken, "/v1/refund-requests/"+r[1], &req)
		require.Equal(t, "succeeded", req.State, r[1])
	}

	var endpoints struct {
		Endpoints []struct {
			ID  string `json:"id"`
			URL string `json:"url"`
		} `json:"endpoints"`
	}
	m.get(t, devOpsToken, "/v1/endpoints", &endpoints)
	require.Len(t, endpoints.Endpoints, 1)
	require.Equal(t, m.world+demo.ReceiverPath, endpoints.Endpoints[0].URL)
	var deliveries struct {
		Deliveries []struct {
			Type string `json:"type"`
		} `json:"deliveries"`
	}
	m.get(t, devOpsToken, "/v1/endpoints/"+endpoints.Endpoints[0].ID+"/deliveries?status=succeeded&limit=100", &deliveries)
	types := map[string]bool{}
	for _, d := range deliveries.Deliveries {
		types[d.Type] = true
	}
	for _, typ := range []string{"payment.succeeded", "payment.disputed", "refund_request.succeeded", "reconciliation_run.completed"} {
		require.True(t, types[typ], "a %s message was delivered to the shop's endpoint: %v", typ, types)
	}
	var received demo.ReceiverStats
	require.Equal(t, http.StatusOK, getJSON(t, m.world+"/demo/receiver", devStripeAPIKey, &received))
	require.Equal(t, len(deliveries.Deliveries), received.Messages, "the shop verified every message paygate delivered")
	require.Zero(t, received.Rejected)

	run := m.reconcileDay(t, yesterday)
	require.Equal(t, "completed", run.Status)
	require.Empty(t, exceptions(run.Summary), "the demo day reconciles")
	require.Equal(t, 27, run.Summary["matched"], "12 charges, a refund, a dispute and their 13 fees")
	require.Zero(t, run.Summary["fee_posted"], "the demo's own run booked the fees")
	itemTypes, converted := map[string]bool{}, map[string]bool{}
	for _, it := range run.Items {
		itemTypes[it.Type] = true
		if it.PresentmentCurrency != nil {
			converted[*it.PresentmentCurrency] = true
		}
	}
	require.Equal(t, map[string]bool{"charge": true, "refund": true, "adjustment": true, "fee": true}, itemTypes)
	require.Equal(t, map[string]bool{"eur": true, "gbp": true, "jpy": true}, converted, "settled in usd at Stripe's rate")
	run = m.reconcileDay(t, today)
	require.Equal(t, "completed", run.Status)
	require.Empty(t, exceptions(run.Summary), "the refunds made through paygate today reconcile too")
	require.Equal(t, 2, run.Summary["matched"])

	// A payment the shop never made, as the banner's signed test event
	// makes one: the shop refuses its refund as Stripe would.
	payload := fmt.Appendf(nil, `{"id":"evt_test_banner","object":"event","api_version":"2024-06-20","created":%d,"livemode":false,`+
		`"type":"payment_intent.succeeded","data":{"object":{"id":"pi_test_1","object":"payment_intent","amount":36000,`+
		`"amount_received":36000,"currency":"usd","status":"succeeded","latest_charge":"ch_test_1"}}}`, time.Now().Unix())
	m.post(t, "", "/webhooks/stripe", string(payload), http.StatusOK,
		"Stripe-Signature", stripesim.SignedRequest(payload, devWebhookSecret, time.Now()))
	require.Eventually(t, func() bool {
		return getJSON(t, "http://"+m.srv.addr+"/v1/payments/pi_test_1", devOpsToken, nil) == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)
	var req struct {
		ID            string  `json:"id"`
		State         string  `json:"state"`
		FailureReason *string `json:"failure_reason"`
	}
	require.NoError(t, json.Unmarshal(m.post(t, devOpsToken, "/v1/payments/pi_test_1/refunds", `{"amount":"5.00"}`, http.StatusAccepted,
		"Idempotency-Key", "test-refund-pi_test_1"), &req))
	require.Eventually(t, func() bool {
		m.get(t, devOpsToken, "/v1/refund-requests/"+req.ID, &req)
		return req.State == "failed"
	}, 30*time.Second, 50*time.Millisecond, "state %s", req.State)
	require.Contains(t, *req.FailureReason, "No such payment_intent: 'pi_test_1'")

	again := m.demo(t)
	require.Contains(t, again, "already registered", "the second run finds its endpoint")
	require.Contains(t, again, "the books match the provider")
	m.get(t, devOpsToken, "/v1/payments?limit=100", &payments)
	require.Len(t, payments.Payments, 19+1+19, "new payments, new ids (and pi_test_1)")
	require.NotEqual(t, twice, requireDoubleCharge(t, m, again), "the shop's orders run on: another order charged twice")
	require.Eventually(t, func() bool {
		countKinds()
		return kinds["double_charge"] == 2
	}, time.Minute, 100*time.Millisecond, "one double_charge email a detection: %v", kinds)
}

// requireDoubleCharge reads, from a demo's output, the order it charged
// twice, found and then resolved, and checks through the API that the
// order's double charge is resolved, with both payments, the extra one
// refunded in full; it returns the order's reference.
func requireDoubleCharge(t *testing.T, m *makeRun, out string) string {
	t.Helper()
	found := regexp.MustCompile(`double +order (ord-\d+) charged twice \((pi_\w+), (pi_\w+)\): detected, open`).FindStringSubmatch(out)
	require.NotNil(t, found, "the demo shows the double charge detected:\n%s", out)
	ref, first, extra := found[1], found[2], found[3]
	require.Contains(t, out, "order "+ref+" charged twice: detected, then resolved by the refund of "+extra)
	require.Regexp(t, `refund +rr_\w+ 158\.00 usd of `+extra+` \(stripe\): succeeded`, out)

	type doubleCharge struct {
		Reference  string     `json:"reference"`
		State      string     `json:"state"`
		ResolvedAt *time.Time `json:"resolved_at"`
		Payments   []struct {
			ID             string `json:"id"`
			AmountCaptured string `json:"amount_captured"`
			AmountRefunded string `json:"amount_refunded"`
		} `json:"payments"`
	}
	var page struct {
		DoubleCharges []doubleCharge `json:"double_charges"`
	}
	m.get(t, devOpsToken, "/v1/ops/double-charges?state=open", &page)
	for _, dc := range page.DoubleCharges {
		require.NotEqual(t, ref, dc.Reference, "no longer open")
	}
	m.get(t, devFinanceToken, "/v1/ops/double-charges?state=resolved&limit=500", &page)
	i := slices.IndexFunc(page.DoubleCharges, func(dc doubleCharge) bool { return dc.Reference == ref })
	require.GreaterOrEqual(t, i, 0, "%s is among the resolved double charges: %+v", ref, page)
	dc := page.DoubleCharges[i]
	require.Equal(t, "resolved", dc.State)
	require.NotNil(t, dc.ResolvedAt)
	require.Len(t, dc.Payments, 2)
	amounts := map[string][2]string{}
	for _, p := range dc.Payments {
		amounts[p.ID] = [2]string{p.AmountCaptured, p.AmountRefunded}
	}
	require.Equal(t, map[string][2]string{first: {"158.00", "0.00"}, extra: {"158.00", "158.00"}}, amounts)
	return ref
}

// TestDemoKnowsItsDatabase: the demo plays only into a database that
// holds its shop's orders and no other shop's. A second checkout's make
// run on the database the first one's demo played into (a shop with a
// journal of its own, numbering from ord-1001 again), and a checkout's
// make run on a new database with the journal of the old one, are each
// told what happened and what to do before a webhook is sent, instead of
// a day whose double charge is another shop's order and whose
// reconciliation finds the other shop's payments missing.
func TestDemoKnowsItsDatabase(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	journal := filepath.Join(t.TempDir(), "demo-world.jsonl")
	first := startMakeRunOn(t, dbURL, journal)
	require.Equal(t, "ord-1018", requireDoubleCharge(t, first, first.demo(t)))
	var before opsStats
	first.get(t, devOpsToken, "/v1/ops/stats", &before)
	first.stop(t)

	second := startMakeRunOn(t, dbURL, filepath.Join(t.TempDir(), "demo-world.jsonl"))
	out, err := runDemo(t, []string{"PAYGATE_ADDR=" + second.srv.addr, "PAYGATE_STRIPE_API_URL=" + second.world})
	require.Error(t, err)
	require.Contains(t, out, "paygate's database already holds order ord-1001, which the demo's shop has not made")
	require.Contains(t, out, "give this one a database of its own")
	require.NotContains(t, out, "sending   the day's webhooks")
	var after opsStats
	second.get(t, devOpsToken, "/v1/ops/stats", &after)
	require.Equal(t, before.Events, after.Events, "nothing was sent")
	second.stop(t)

	_, freshURL := testdb.NewWithURL(t)
	third := startMakeRunOn(t, freshURL, journal)
	out, err = runDemo(t, []string{"PAYGATE_ADDR=" + third.srv.addr, "PAYGATE_STRIPE_API_URL=" + third.world})
	require.Error(t, err)
	require.Contains(t, out, "the demo's shop has made orders up to ord-1018, which paygate's database does not hold")
	require.Contains(t, out, "Remove the journal (make run's: .tools/run/demo-world.jsonl)")
	require.NotContains(t, out, "sending   the day's webhooks")
}

// TestDemoRefusals: the demo needs a running paygate and never plays its
// shop as a real Stripe account.
func TestDemoRefusals(t *testing.T) {
	t.Parallel()
	out, err := runDemo(t, []string{"PAYGATE_ADDR=" + freeport.Addr(t)})
	require.Error(t, err)
	require.Contains(t, out, "start it with `make run`")
	for name, env := range map[string]map[string]string{
		"Stripe's API": {"PAYGATE_STRIPE_API_URL": "https://api.stripe.com"},
		"a live key":   {"PAYGATE_STRIPE_API_KEY": "sk_live_" + "demo"},
		"not a URL":    {"PAYGATE_STRIPE_API_URL": "127.0.0.1"},
	} {
		_, _, err := demoWorld(func(k string) string { return env[k] })
		require.Error(t, err, name)
	}
	world, key, err := demoWorld(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, devDemoURL, world, "make run's shop")
	require.Equal(t, devStripeAPIKey, key)
}

// TestDemoDefaultsAreMakeRuns: a demo started from a fresh shell finds
// make run's paygate and shop with its own defaults, so they must be
// run.sh's and dev-services.sh's.
func TestDemoDefaultsAreMakeRuns(t *testing.T) {
	t.Parallel()
	dev := devDefaults(t)
	require.Equal(t, devWebhookSecret, dev["PAYGATE_STRIPE_WEBHOOK_SECRETS"])
	require.Equal(t, devAdyenHMACKey, dev["PAYGATE_ADYEN_HMAC_KEYS"])
	require.Equal(t, devAdyenBasicAuth, dev["PAYGATE_ADYEN_BASIC_AUTH"])
	require.Equal(t, devOpsToken, dev["PAYGATE_OPS_TOKENS"])
	require.Equal(t, devFinanceToken, dev["PAYGATE_FINANCE_TOKENS"])
	require.Equal(t, "127.0.0.1:8080", dev["PAYGATE_ADDR"])
	services, err := os.ReadFile("../../scripts/dev-services.sh")
	require.NoError(t, err)
	for _, want := range []string{
		`PAYGATE_STRIPE_API_KEY="` + devStripeAPIKey + `"`,
		`PAYGATE_ADYEN_API_KEY="` + devAdyenAPIKey + `"`,
		`PAYGATE_ADYEN_MERCHANT_ACCOUNT:-` + devAdyenMerchant + `}`,
		`port=$(_dev_free_port "${PAYGATE_DEMO_PORT:-` + strings.TrimPrefix(devDemoURL, "http://127.0.0.1:") + `}")`,
		`bin/paygate demo serve --listen "127.0.0.1:$port"`,
	} {
		require.Contains(t, string(services), want)
	}
	cfg, err := loadConfig(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:8080", gatewayURL(cfg.Addr))
	require.Equal(t, "http://127.0.0.1:8080", gatewayURL("0.0.0.0:8080"))
	require.Equal(t, "http://127.0.0.1:8080", gatewayURL(":8080"))
	require.Equal(t, "tok", firstToken([]string{"alice:tok", "other"}, "def"))
	require.Equal(t, "def", firstToken(nil, "def"))
	require.True(t, slices.Contains([]string{"bare"}, firstToken([]string{"bare"}, "def")))
}
