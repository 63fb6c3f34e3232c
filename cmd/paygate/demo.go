package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/paygate/paygate/internal/demo"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/refund"
)

const demoUsage = `usage:
  paygate demo [--date YYYY-MM-DD] [--no-endpoint] [--wait 2m]
  paygate demo serve [--listen 127.0.0.1:12111] [--journal FILE]

paygate demo shows paygate working on a running server (make run): the
demo's shop sends a day of payments (by default yesterday, UTC) from its
Stripe account and its Adyen merchant account through paygate's webhook
endpoints, signed as the providers sign them, each naming the shop's
order, its shopper and what was bought; checks that paygate found the
order the day charges twice; refunds two Stripe payments (the extra one
of that order among them) and an Adyen one through paygate's refund API,
and checks that the double charge is resolved; registers the shop's
endpoint for paygate's messages; reconciles the day; and prints what to
open in the console. Run it again for another set of payments and orders.

paygate demo serve is the shop's side, which make run starts: the
simulated Stripe and Adyen APIs paygate calls (PAYGATE_STRIPE_API_URL,
PAYGATE_ADYEN_CHECKOUT_URL point at it), the webhooks that follow a
refund, and the endpoint that receives paygate's messages.

Both read make run's environment, with its development values when unset.
`

// The development values scripts/run.sh and scripts/dev-services.sh give
// `make run`, for a demo started from a shell without its environment.
const (
	devDemoURL        = "http://127.0.0.1:12111"
	devStripeAPIKey   = "sk_test_devpaygatelocal"
	devWebhookSecret  = "whsec_dev_paygate_local"
	devAdyenHMACKey   = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	devAdyenBasicAuth = "adyen:dev-adyen-password"
	devAdyenAPIKey    = "AQE_dev_paygate_local"
	devAdyenMerchant  = "PaygateDev"
	devOpsToken       = "dev-ops-token"
	devFinanceToken   = "dev-finance-token"
)

func cmdDemo(ctx context.Context, cfg config, logger *slog.Logger, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "serve":
			return cmdDemoServe(ctx, cfg, logger, args[1:], stdout)
		case "-h", "--help", "help":
			fmt.Fprint(stdout, demoUsage)
			return nil
		}
	}
	fs := newFlagSet("demo")
	date := fs.String("date", "", "the UTC day to play (default: yesterday)")
	noEndpoint := fs.Bool("no-endpoint", false, "do not register the shop's endpoint for paygate's messages")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for each step (events applied, refunds, the run, deliveries)")
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Sprintf("demo: %v\n\n%s", err, demoUsage)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("demo: unexpected argument %q\n\n%s", fs.Arg(0), demoUsage)}
	}
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	if *date != "" {
		d, err := reconcile.ParseDate(*date, time.Now())
		if err != nil {
			return usageError{fmt.Sprintf("demo: --date: %v", err)}
		}
		day = d
	}
	if *wait <= 0 {
		return usageError{"demo: --wait must be positive"}
	}
	world, key, err := demoWorld(getenv)
	if err != nil {
		return err
	}
	d := &demoRun{
		out:     stdout,
		http:    &http.Client{Timeout: *wait},
		gateway: gatewayURL(cfg.Addr),
		ops:     firstToken(cfg.OpsTokens, devOpsToken),
		finance: firstToken(cfg.FinanceTokens, devFinanceToken),
		world:   world,
		key:     key,
		wait:    *wait,
	}
	return d.run(ctx, day, !*noEndpoint)
}

// demoWorld is where the demo's shop answers, and its key: make run's
// PAYGATE_STRIPE_API_URL and PAYGATE_STRIPE_API_KEY, since it is
// paygate's Stripe. It refuses Stripe itself and live keys.
func demoWorld(getenv func(string) string) (string, string, error) {
	world := strings.TrimRight(or(getenv("PAYGATE_STRIPE_API_URL"), devDemoURL), "/")
	key := or(getenv("PAYGATE_STRIPE_API_KEY"), devStripeAPIKey)
	u, err := url.Parse(world)
	if err != nil || u.Host == "" {
		return "", "", fmt.Errorf("demo: PAYGATE_STRIPE_API_URL %q is not a URL", world)
	}
	if strings.HasSuffix(u.Hostname(), "stripe.com") || strings.Contains(key, "_live_") {
		return "", "", errors.New("demo: PAYGATE_STRIPE_API_URL and PAYGATE_STRIPE_API_KEY name a real Stripe account: " +
			"the demo plays its own shop, which make run serves in their place (unset them, or run make run)")
	}
	return world, key, nil
}

// gatewayURL is paygate's URL from its listen address: a wildcard host is
// reached on the loopback.
func gatewayURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// firstToken is the token of a role's first entry (name:token or a bare
// token), or def when the role has none.
func firstToken(entries []string, def string) string {
	if len(entries) == 0 {
		return def
	}
	if _, token, named := strings.Cut(entries[0], ":"); named {
		return strings.TrimSpace(token)
	}
	return entries[0]
}

// demoRun is one run of the demo against a paygate and its demo world.
type demoRun struct {
	out          io.Writer
	http         *http.Client
	gateway      string
	ops, finance string
	world, key   string
	wait         time.Duration
	endpointID   string
	endpointURL  string
	problems     []string
	poisonBefore int
	// received is what the shop's endpoint had received before this run.
	received demo.ReceiverStats
}

func (d *demoRun) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demoRun) run(ctx context.Context, day time.Time, endpoint bool) error {
	date := day.Format(reconcile.DateLayout)
	d.say("paygate demo: a day at a shop, %s (UTC), for paygate at %s", date, d.gateway)
	info, err := d.check(ctx)
	if err != nil {
		return err
	}
	if err := d.sameShop(ctx, info); err != nil {
		return err
	}
	if endpoint {
		if err := d.ensureEndpoint(ctx, info); err != nil {
			return err
		}
	}

	d.say("  sending   the day's webhooks from the shop's Stripe and Adyen accounts…")
	var rep demo.DayReport
	if _, err := d.call(ctx, http.MethodPost, d.world+"/demo/days", d.key, "", map[string]string{"date": date}, &rep); err != nil {
		return fmt.Errorf("demo: play the day: %w", err)
	}
	d.sayDelivery("stripe", rep.Stripe, rep.Payments)
	d.sayDelivery("adyen", rep.Adyen, rep.Payments)

	if len(rep.Stripe.Failed)+len(rep.Adyen.Failed) > 0 {
		return errors.New("demo: paygate refused some webhooks (above): are PAYGATE_STRIPE_WEBHOOK_SECRETS, PAYGATE_ADYEN_HMAC_KEYS " +
			"and PAYGATE_ADYEN_BASIC_AUTH the same for paygate and the demo's world?")
	}
	if err := d.awaitApplied(ctx, rep.Stripe.Events+rep.Adyen.Events); err != nil {
		return err
	}
	if err := d.awaitDoubleCharges(ctx, rep.DoubleCharges, ledgerOpen); err != nil {
		return err
	}
	if err := d.refund(ctx, rep.Refunds); err != nil {
		return err
	}
	if err := d.awaitDoubleCharges(ctx, rep.DoubleCharges, ledgerResolved); err != nil {
		return err
	}
	runID, err := d.reconcile(ctx, date)
	if err != nil {
		return err
	}
	if endpoint {
		d.awaitDeliveries(ctx)
	}

	d.say("")
	d.say("Open the console: %s/console/ (sign in with %s)", d.gateway, d.signInHint())
	d.say("  payments        %s/console/payments", d.gateway)
	d.say("  the run         %s/console/reconciliation/runs/%d", d.gateway, runID)
	d.say("  the books       %s/console/books", d.gateway)
	for _, dc := range rep.DoubleCharges {
		d.say("  order %-9s %s/console/payments?reference=%s", dc.Reference, d.gateway, url.QueryEscape(dc.Reference))
	}
	if d.endpointID != "" {
		d.say("  deliveries      %s/console/endpoints/%s", d.gateway, d.endpointID)
	}
	d.say("The README's \"Console tour\" walks through them (step by step: docs/operations.md).")
	if len(d.problems) > 0 {
		return fmt.Errorf("demo: %s", strings.Join(d.problems, "; "))
	}
	return nil
}

func (d *demoRun) signInHint() string {
	if d.ops == devOpsToken && d.finance == devFinanceToken {
		return devOpsToken + ", or " + devFinanceToken + " for finance's view"
	}
	return "an ops token, or a finance token for finance's view"
}

// sameShop checks that paygate's database holds this shop's orders and no
// other's: the shop's last order (when it has one) and not its next. A
// database another checkout's make run played into holds that shop's
// ord-1001 onwards, and this shop's day would mix its orders with them and
// not reconcile with the other shop's account; a journal kept past its
// database (dropped, or another one given) makes a shop whose days paygate
// never saw, which do not reconcile either.
func (d *demoRun) sameShop(ctx context.Context, info demo.Info) error {
	holds := func(ref string) (bool, error) {
		var page struct {
			Payments []json.RawMessage `json:"payments"`
		}
		if _, err := d.call(ctx, http.MethodGet, d.gateway+"/v1/payments?limit=1&reference="+url.QueryEscape(ref), d.ops, "", nil, &page); err != nil {
			return false, fmt.Errorf("demo: look up order %s in paygate: %w", ref, err)
		}
		return len(page.Payments) > 0, nil
	}
	if info.Orders > 0 {
		last := demo.OrderReference(info.Orders)
		held, err := holds(last)
		if err != nil {
			return err
		}
		if !held {
			return fmt.Errorf("demo: the demo's shop has made orders up to %s, which paygate's database does not hold: "+
				"the shop's journal outlived the database its days were played into. Remove the journal "+
				"(make run's: .tools/run/demo-world.jsonl) and start make run again", last)
		}
	}
	next := demo.OrderReference(info.Orders + 1)
	held, err := holds(next)
	if err != nil {
		return err
	}
	if held {
		return fmt.Errorf("demo: paygate's database already holds order %s, which the demo's shop has not made: another "+
			"demo shop, with a journal of its own (another checkout's make run), played into this database, and this "+
			"shop's day would mix its orders with that one's and not reconcile with its account. Play the demo from that "+
			"checkout, or give this one a database of its own, for example: "+
			"psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE paygate_other', then "+
			"DATABASE_URL='postgres://postgres@127.0.0.1:5432/paygate_other?sslmode=disable' make run", next)
	}
	return nil
}

// check finds paygate, its ops token accepted, and the demo's world.
func (d *demoRun) check(ctx context.Context) (demo.Info, error) {
	var info demo.Info
	if _, err := d.call(ctx, http.MethodGet, d.gateway+"/readyz", "", "", nil, nil); err != nil {
		return info, fmt.Errorf("demo: paygate is not ready at %s (%v): start it with `make run`, or set PAYGATE_ADDR", d.gateway, err)
	}
	var stats opsStats
	if _, err := d.call(ctx, http.MethodGet, d.gateway+"/v1/ops/stats", d.ops, "", nil, &stats); err != nil {
		return info, fmt.Errorf("demo: paygate refuses the ops token (%v): set PAYGATE_OPS_TOKENS as paygate has it", err)
	}
	d.poisonBefore = stats.Events["poison"]
	if _, err := d.call(ctx, http.MethodGet, d.world+"/demo", d.key, "", nil, &info); err != nil || info.World != demo.WorldName {
		if err == nil {
			err = errors.New("it is not a demo world")
		}
		return info, fmt.Errorf("demo: the demo's shop does not answer at %s (%v): make run starts it "+
			"(scripts/dev-services.sh) as paygate's Stripe API; by hand, run `paygate demo serve` and start paygate "+
			"with PAYGATE_STRIPE_API_URL=%s", d.world, err, d.world)
	}
	if info.GatewayURL != d.gateway {
		d.say("  note      the shop sends its webhooks to %s, this demo talks to paygate at %s", info.GatewayURL, d.gateway)
	}
	return info, nil
}

type opsStats struct {
	Events map[string]int `json:"events"`
}

// ensureEndpoint registers the shop's endpoint for every message type, or
// finds it registered by an earlier run, and gives its secret to the
// shop's receiver, which verifies every delivery with it.
func (d *demoRun) ensureEndpoint(ctx context.Context, info demo.Info) error {
	var list struct {
		Endpoints []struct {
			ID     string `json:"id"`
			URL    string `json:"url"`
			Status string `json:"status"`
		} `json:"endpoints"`
		NextCursor *string `json:"next_cursor"`
	}
	var secret string
	for cursor := ""; ; {
		if _, err := d.call(ctx, http.MethodGet, d.gateway+"/v1/endpoints?limit=100&cursor="+url.QueryEscape(cursor), d.ops, "", nil, &list); err != nil {
			return fmt.Errorf("demo: list endpoints: %w", err)
		}
		for _, e := range list.Endpoints {
			if e.URL == info.ReceiverURL && e.Status == "enabled" {
				d.endpointID = e.ID
			}
		}
		if d.endpointID != "" || list.NextCursor == nil || *list.NextCursor == "" {
			break
		}
		cursor = *list.NextCursor
	}
	verb := "already registered"
	if d.endpointID != "" {
		var s struct {
			Secret string `json:"secret"`
		}
		if _, err := d.call(ctx, http.MethodGet, d.gateway+"/v1/endpoints/"+url.PathEscape(d.endpointID)+"/secret", d.ops, "", nil, &s); err != nil {
			return fmt.Errorf("demo: read the endpoint's secret: %w", err)
		}
		secret = s.Secret
	} else {
		var created struct {
			ID     string `json:"id"`
			Secret string `json:"secret"`
		}
		body := map[string]any{"url": info.ReceiverURL, "event_types": []string{"*"},
			"description": "the demo's shop (paygate demo): verifies and counts every message"}
		if _, err := d.call(ctx, http.MethodPost, d.gateway+"/v1/endpoints", d.ops, "demo-endpoint-"+nonce(), body, &created); err != nil {
			return fmt.Errorf("demo: register the shop's endpoint %s: %w (make run sets PAYGATE_DELIVERY_ALLOW_PRIVATE=true, "+
				"which a local endpoint needs; or pass --no-endpoint)", info.ReceiverURL, err)
		}
		d.endpointID, secret, verb = created.ID, created.Secret, "registered"
	}
	if _, err := d.call(ctx, http.MethodPost, d.world+"/demo/receiver/secrets", d.key, "", map[string]string{"secret": secret}, nil); err != nil {
		return fmt.Errorf("demo: give the endpoint's secret to the shop: %w", err)
	}
	if _, err := d.call(ctx, http.MethodGet, d.world+"/demo/receiver", d.key, "", nil, &d.received); err != nil {
		return fmt.Errorf("demo: ask the shop what it received: %w", err)
	}
	d.endpointURL = info.ReceiverURL
	d.say("  endpoint  %s %s: %s receives every message and checks its signature", d.endpointID, verb, info.ReceiverURL)
	return nil
}

func (d *demoRun) sayDelivery(provider string, del demo.Delivery, payments []demo.Payment) {
	var currencies []string
	n := 0
	for _, p := range payments {
		if p.Provider == provider {
			n++
			if !slices.Contains(currencies, p.Currency) {
				currencies = append(currencies, p.Currency)
			}
		}
	}
	what := "events"
	if provider == "adyen" {
		what = "notifications"
	}
	line := fmt.Sprintf("  %-9s %d %s for %d payments (%s) to %s: %d accepted", provider, del.Events, what, n,
		strings.Join(currencies, ", "), del.URL, del.Accepted)
	if del.Duplicates > 0 {
		line += fmt.Sprintf(" (%d already known)", del.Duplicates)
	}
	d.say("%s", line)
	for _, p := range payments {
		if p.Provider == provider {
			d.say("            %-28s %10s %s  %-8s  %s", p.ID, p.Amount, p.Currency, p.Reference, p.Story)
		}
	}
	for _, f := range del.Failed {
		d.say("            refused: %s", f)
	}
}

// awaitApplied waits until paygate has no event waiting to be applied.
func (d *demoRun) awaitApplied(ctx context.Context, sent int) error {
	var stats opsStats
	err := d.poll(ctx, func() (bool, error) {
		if _, err := d.call(ctx, http.MethodGet, d.gateway+"/v1/ops/stats", d.ops, "", nil, &stats); err != nil {
			return false, err
		}
		return stats.Events["received"] == 0, nil
	})
	if err != nil {
		return fmt.Errorf("demo: wait for paygate to apply the day's %d events: %w", sent, err)
	}
	line := fmt.Sprintf("  applied   all %d events (paygate: %d processed, %d ignored in all)", sent, stats.Events["processed"], stats.Events["ignored"])
	if n := stats.Events["poison"] - d.poisonBefore; n > 0 {
		line += fmt.Sprintf("; %d new poison events", n)
		d.problems = append(d.problems, fmt.Sprintf("%d events became poison (console: Poison queue)", n))
	}
	d.say("%s", line)
	return nil
}

// The states of a double charge the demo waits for.
const (
	ledgerOpen     = "open"
	ledgerResolved = "resolved"
)

// doubleChargeView is a double charge as GET /v1/ops/double-charges
// answers it.
type doubleChargeView struct {
	Reference string `json:"reference"`
	State     string `json:"state"`
	Payments  []struct {
		ID             string `json:"id"`
		AmountCaptured string `json:"amount_captured"`
		AmountRefunded string `json:"amount_refunded"`
	} `json:"payments"`
}

// doubleCharge finds the double charge of reference among those in state,
// page by page; nil when it is not there.
func (d *demoRun) doubleCharge(ctx context.Context, state, reference string) (*doubleChargeView, error) {
	var page struct {
		DoubleCharges []doubleChargeView `json:"double_charges"`
		NextCursor    *string            `json:"next_cursor"`
	}
	for cursor := ""; ; {
		path := d.gateway + "/v1/ops/double-charges?limit=100&state=" + url.QueryEscape(state) + "&cursor=" + url.QueryEscape(cursor)
		if _, err := d.call(ctx, http.MethodGet, path, d.ops, "", nil, &page); err != nil {
			return nil, err
		}
		for i, dc := range page.DoubleCharges {
			if dc.Reference == reference {
				return &page.DoubleCharges[i], nil
			}
		}
		if page.NextCursor == nil || *page.NextCursor == "" {
			return nil, nil
		}
		cursor = *page.NextCursor
	}
}

// awaitDoubleCharges waits until paygate shows each order the day charged
// twice as a double charge in state, with the order's payments: open once
// the day is applied (detected: ops get its email), resolved once the
// refund of its extra payment is. One that does not get there is a
// problem the demo exits with.
func (d *demoRun) awaitDoubleCharges(ctx context.Context, twice []demo.DoubleCharge, state string) error {
	for _, want := range twice {
		var found *doubleChargeView
		err := d.poll(ctx, func() (bool, error) {
			var err error
			found, err = d.doubleCharge(ctx, state, want.Reference)
			return found != nil && len(found.Payments) == len(want.Payments), err
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ids []string
		if found != nil {
			for _, p := range found.Payments {
				ids = append(ids, p.ID)
			}
		}
		slices.Sort(ids)
		wantIDs := slices.Sorted(slices.Values(want.Payments))
		if err != nil || !slices.Equal(ids, wantIDs) {
			what := "detected"
			if state == ledgerResolved {
				what = "resolved by the refund of " + want.Extra
			}
			d.say("  double    order %s charged twice (%s): not %s (%v)", want.Reference, strings.Join(want.Payments, ", "), what, err)
			d.problems = append(d.problems, fmt.Sprintf("the double charge of order %s was not %s", want.Reference, what))
			continue
		}
		if state == ledgerOpen {
			d.say("  double    order %s charged twice (%s): detected, open; ops are emailed",
				want.Reference, strings.Join(want.Payments, ", "))
		} else {
			d.say("  double    order %s charged twice: detected, then resolved by the refund of %s", want.Reference, want.Extra)
		}
	}
	return nil
}

// refund asks paygate for the day's refunds through its refund API, as ops
// would, and follows each until the provider settles it.
func (d *demoRun) refund(ctx context.Context, refunds []demo.Refund) error {
	requests := make([]refund.View, len(refunds)) // as the refund API answers
	for i, r := range refunds {
		body := map[string]string{"reason": r.Reason, "note": r.Note}
		if r.Amount != "" {
			body["amount"] = r.Amount
		}
		path := d.gateway + "/v1/payments/" + url.PathEscape(r.PaymentID) + "/refunds"
		if _, err := d.call(ctx, http.MethodPost, path, d.ops, "demo-refund-"+r.PaymentID, body, &requests[i]); err != nil {
			return fmt.Errorf("demo: refund %s: %w", r.PaymentID, err)
		}
	}
	err := d.poll(ctx, func() (bool, error) {
		open := false
		for i := range requests {
			if requests[i].State == refund.StateSucceeded || requests[i].State == refund.StateFailed {
				continue
			}
			if _, err := d.call(ctx, http.MethodGet, d.gateway+"/v1/refund-requests/"+url.PathEscape(requests[i].ID), d.ops, "", nil, &requests[i]); err != nil {
				return false, err
			}
			open = open || requests[i].State != refund.StateSucceeded && requests[i].State != refund.StateFailed
		}
		return !open, nil
	})
	for i, r := range requests {
		line := fmt.Sprintf("  refund    %s %s %s of %s (%s): %s", r.ID, r.Amount, r.Currency, r.PaymentID, refunds[i].Provider, r.State)
		if r.ProviderRefundID != nil {
			line += ", " + refunds[i].Provider + " refund " + *r.ProviderRefundID
		}
		if r.FailureReason != nil {
			line += ": " + *r.FailureReason
		}
		d.say("%s", line)
		if r.State == refund.StateFailed {
			d.problems = append(d.problems, "refund request "+r.ID+" failed")
		}
	}
	if err != nil {
		return fmt.Errorf("demo: follow the refunds: %w", err)
	}
	return nil
}

type demoRunView struct {
	ID      int64          `json:"id"`
	Date    string         `json:"date"`
	Status  string         `json:"status"`
	Error   *string        `json:"error"`
	Summary map[string]int `json:"summary"`
}

// reconcile asks paygate (as finance) for a run of the day and waits for
// its outcome.
func (d *demoRun) reconcile(ctx context.Context, date string) (int64, error) {
	var run demoRunView
	if _, err := d.call(ctx, http.MethodPost, d.gateway+"/v1/reconciliation/runs", d.finance, "demo-run-"+date+"-"+nonce(),
		map[string]string{"date": date}, &run); err != nil {
		return 0, fmt.Errorf("demo: start the reconciliation of %s (with the finance token): %w", date, err)
	}
	err := d.poll(ctx, func() (bool, error) {
		if _, err := d.call(ctx, http.MethodGet, fmt.Sprintf("%s/v1/reconciliation/runs/%d", d.gateway, run.ID), d.finance, "", nil, &run); err != nil {
			return false, err
		}
		return run.Status != string(reconcile.RunRunning), nil
	})
	if err != nil {
		return run.ID, fmt.Errorf("demo: wait for reconciliation run %d: %w", run.ID, err)
	}
	if run.Status == string(reconcile.RunFailed) {
		d.say("  reconciled run #%d of %s failed: %s", run.ID, date, deref(run.Error))
		d.problems = append(d.problems, fmt.Sprintf("reconciliation run %d failed", run.ID))
		return run.ID, nil
	}
	var counts []string
	exceptions := 0
	for _, st := range reconcile.Statuses {
		if n := run.Summary[string(st)]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, st))
			if st != reconcile.StatusMatched && st != reconcile.StatusFeePosted {
				exceptions += n
			}
		}
	}
	verdict := "the books match the provider"
	if exceptions > 0 {
		verdict = fmt.Sprintf("%d items to investigate", exceptions)
		d.problems = append(d.problems, fmt.Sprintf("reconciliation run %d has %d exceptions", run.ID, exceptions))
	}
	d.say("  reconciled run #%d of %s (Stripe): %s; %s", run.ID, date, strings.Join(counts, ", "), verdict)
	return run.ID, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// awaitDeliveries waits until the shop's endpoint has the message of the
// day's reconciliation run, the last change of the demo (messages are
// handed to endpoints in the order they were written), and paygate has
// nothing pending for it; then tells what the shop received.
func (d *demoRun) awaitDeliveries(ctx context.Context) {
	const last = "reconciliation_run.completed"
	var (
		pending struct {
			Deliveries []json.RawMessage `json:"deliveries"`
		}
		rs demo.ReceiverStats
	)
	path := d.gateway + "/v1/endpoints/" + url.PathEscape(d.endpointID) + "/deliveries?status=pending&limit=1"
	err := d.poll(ctx, func() (bool, error) {
		if _, err := d.call(ctx, http.MethodGet, d.world+"/demo/receiver", d.key, "", nil, &rs); err != nil {
			return false, err
		}
		if rs.ByType[last] <= d.received.ByType[last] {
			return false, nil
		}
		if _, err := d.call(ctx, http.MethodGet, path, d.ops, "", nil, &pending); err != nil {
			return false, err
		}
		return len(pending.Deliveries) == 0, nil
	})
	if err != nil {
		d.say("  delivered messages are still pending at %s (%v): the console's Downstream page shows them", d.endpointURL, err)
		d.problems = append(d.problems, "deliveries still pending")
		return
	}
	types := make([]string, 0, len(rs.ByType))
	for t := range rs.ByType {
		types = append(types, t)
	}
	slices.Sort(types)
	for i, t := range types {
		types[i] = fmt.Sprintf("%s %d", t, rs.ByType[t])
	}
	d.say("  delivered %d new messages to the shop's endpoint, every signature verified (in all: %s)",
		rs.Messages-d.received.Messages, strings.Join(types, ", "))
	if rs.Rejected > 0 {
		d.say("            %d deliveries failed the shop's signature check", rs.Rejected)
	}
}

// poll calls done every 250 ms until it reports true, fails, or the wait
// passes.
func (d *demoRun) poll(ctx context.Context, done func() (bool, error)) error {
	deadline := time.Now().Add(d.wait)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s (--wait)", d.wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// call sends a JSON request and decodes a 2xx answer into out; any other
// answer is an error carrying the problem's detail.
func (d *demoRun) call(ctx context.Context, method, target, token, idempotencyKey string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	res, err := d.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return res.StatusCode, err
	}
	if res.StatusCode/100 != 2 {
		var problem struct {
			Title  string `json:"title"`
			Detail string `json:"detail"`
			Error  string `json:"error"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &problem) == nil && (problem.Detail != "" || problem.Title != "" || problem.Error != "") {
			msg = strings.TrimSpace(problem.Title + ": " + problem.Detail + problem.Error)
		}
		return res.StatusCode, fmt.Errorf("%s %s: %d %s", method, strings.SplitN(target, "?", 2)[0], res.StatusCode, msg)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s: read the answer: %w", method, target, err)
		}
	}
	return res.StatusCode, nil
}

func nonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cmdDemoServe serves the demo's world until interrupted: the shop's
// Stripe and Adyen, as paygate's provider APIs, and its endpoint.
func cmdDemoServe(ctx context.Context, cfg config, logger *slog.Logger, args []string, stdout io.Writer) error {
	fs := newFlagSet("demo serve")
	listen := fs.String("listen", strings.TrimPrefix(devDemoURL, "http://"), "address to serve the shop's providers and endpoint on")
	journal := fs.String("journal", "", "file keeping the shop's payments across restarts (default: none)")
	if err := fs.Parse(args); err != nil {
		return usageError{fmt.Sprintf("demo serve: %v\n\n%s", err, demoUsage)}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("demo serve: unexpected argument %q\n\n%s", fs.Arg(0), demoUsage)}
	}
	key := or(getenv("PAYGATE_STRIPE_API_KEY"), devStripeAPIKey)
	if strings.Contains(key, "_live_") {
		return errors.New("demo serve: PAYGATE_STRIPE_API_KEY is a live key: the demo's shop answers for a test account only")
	}
	secret := devWebhookSecret
	if len(cfg.StripeSecrets) > 0 {
		secret = cfg.StripeSecrets[0]
	}
	hmacKey := cfg.AdyenHMACKeys
	if len(hmacKey) == 0 {
		var err error
		if hmacKey, err = adyen.ParseKeys(devAdyenHMACKey); err != nil {
			return err
		}
	}
	basicAuth := cfg.AdyenBasicAuth
	if _, set := os.LookupEnv("PAYGATE_ADYEN_BASIC_AUTH"); !set {
		basicAuth = devAdyenBasicAuth
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("demo serve: listen on %s: %w", *listen, err)
	}
	w, err := demo.Open(demo.Config{
		GatewayURL:           gatewayURL(cfg.Addr),
		BaseURL:              gatewayURL(ln.Addr().String()),
		StripeAPIKey:         key,
		StripeWebhookSecret:  secret,
		AdyenAPIKey:          or(cfg.AdyenAPIKey, devAdyenAPIKey),
		AdyenMerchantAccount: or(cfg.AdyenMerchantAccount, devAdyenMerchant),
		AdyenHMACKey:         hmacKey[0],
		AdyenBasicAuth:       basicAuth,
		JournalPath:          *journal,
		Logger:               logger,
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("demo serve: %w", err)
	}
	defer w.Close()
	srv := &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "paygate demo serve: the shop's Stripe and Adyen on http://%s, its endpoint at %s, webhooks to %s\n",
		ln.Addr(), w.ReceiverURL(), gatewayURL(cfg.Addr))
	select {
	case err := <-errc:
		return fmt.Errorf("demo serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
