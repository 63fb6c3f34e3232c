// Package demo is the world `paygate demo` shows paygate working in: a
// shop's Stripe account and Adyen merchant account, played by the
// project's simulators (internal/stripesim, internal/adyensim), and the
// shop's own endpoint that receives paygate's messages.
//
// The World plays a realistic day on the simulators and delivers its
// webhooks to paygate, signed as Stripe and Adyen sign them; it serves the
// provider APIs paygate calls (Stripe's balance transactions, events and
// refunds; Adyen's Checkout refunds), answering as the providers do, with
// the webhooks that follow a refund; and it keeps a journal, so that a
// world started again holds what paygate recorded. `make run` runs one
// (`paygate demo serve`) as paygate's Stripe and Adyen API; the demo
// command asks it for a day.
//
// It is development tooling: cmd's demo command is its only importer, and
// it never talks to a real provider.
package demo

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/stripesim"
)

// Config configures a World.
type Config struct {
	// GatewayURL is paygate's base URL, where webhooks are delivered
	// (http://127.0.0.1:8080).
	GatewayURL string
	// BaseURL is the world's own base URL, as paygate reaches it; the
	// receiver's URL is BaseURL + ReceiverPath.
	BaseURL string
	// StripeAPIKey is the secret key the Stripe API and the control API
	// take.
	StripeAPIKey string
	// StripeWebhookSecret signs the Stripe events (whsec_…).
	StripeWebhookSecret string
	// AdyenAPIKey and AdyenMerchantAccount are what the Checkout API takes.
	AdyenAPIKey          string
	AdyenMerchantAccount string
	// AdyenHMACKey signs Adyen's items (the raw key); AdyenBasicAuth, when
	// set ("user:password"), goes with each delivery.
	AdyenHMACKey   []byte
	AdyenBasicAuth string
	// JournalPath keeps the world's changes across restarts; empty keeps
	// nothing.
	JournalPath string
	Logger      *slog.Logger
	// Now is the wall clock; time.Now when nil.
	Now func() time.Time
	// Client delivers the webhooks; one with a 10 s timeout when nil.
	Client *http.Client
}

// World is a shop's providers and its receiving endpoint.
type World struct {
	cfg                    Config
	stripe                 *stripesim.Sim
	adyen                  *adyensim.Sim
	receiver               *Receiver
	stripeAPI, checkoutAPI http.Handler

	// mu serializes what changes the providers' state and the journal: a
	// day being played, a refund being made, a refund being settled.
	mu      sync.Mutex
	journal *journal
	days    []string
	shop    *shop

	// Webhooks that follow a refund leave after its answer, in the
	// background, until Close.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Open makes a World, replaying its journal when Config.JournalPath names
// one.
func Open(cfg Config) (*World, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	cfg.GatewayURL = strings.TrimRight(cfg.GatewayURL, "/")
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	var (
		j       *journal
		h       = journalHeader{StripeSeed: randomSeed(), AdyenSeed: randomSeed()}
		entries []entry
	)
	if cfg.JournalPath != "" {
		var err error
		if j, h, entries, err = openJournal(cfg.JournalPath); err != nil {
			return nil, err
		}
	}
	now := cfg.Now()
	w := &World{
		cfg: cfg,
		stripe: stripesim.New(stripesim.Config{
			APIKey: cfg.StripeAPIKey, WebhookSecret: cfg.StripeWebhookSecret, Seed: h.StripeSeed, Now: now,
			SettlementCurrency: stripeSettlement, ExchangeRates: stripeRates,
		}),
		adyen: adyensim.New(adyensim.Config{
			MerchantAccount: cfg.AdyenMerchantAccount, HMACKey: cfg.AdyenHMACKey, Start: now, Seed: h.AdyenSeed,
			APIKey: cfg.AdyenAPIKey, Client: cfg.Client,
		}),
		receiver: newReceiver(cfg.Now),
		journal:  j,
		shop:     newShop(),
	}
	w.stripeAPI, w.checkoutAPI = w.stripe.Handler(), w.adyen.CheckoutHandler()
	w.ctx, w.cancel = context.WithCancel(context.Background())
	for i, e := range entries {
		if err := w.replay(e); err != nil {
			j.close()
			return nil, fmt.Errorf("replay the journal %s, entry %d (%s): %w", cfg.JournalPath, i+2, e.Op, err)
		}
	}
	if len(entries) > 0 {
		cfg.Logger.Info("demo world restored from its journal", "changes", len(entries), "days", len(w.days))
	}
	return w, nil
}

// Close waits for the webhooks still being delivered, stopping their
// retries, and closes the journal.
func (w *World) Close() error {
	w.cancel()
	w.wg.Wait()
	return w.journal.close()
}

// Receiver is the shop's endpoint.
func (w *World) Receiver() *Receiver { return w.receiver }

// ReceiverURL is the endpoint's URL, for paygate's POST /v1/endpoints.
func (w *World) ReceiverURL() string { return w.cfg.BaseURL + ReceiverPath }

// replay applies a journal entry to the simulators, delivering nothing:
// paygate had what it caused when it was recorded.
func (w *World) replay(e entry) error {
	switch e.Op {
	case opDay:
		day, err := time.Parse(time.DateOnly, e.Date)
		if err != nil {
			return err
		}
		w.script(day)
	case opStripeRefund:
		w.stripe.SetNow(e.At)
		rec := httptest.NewRecorder()
		w.stripeAPI.ServeHTTP(rec, w.apiRequest(e, "application/x-www-form-urlencoded", "Authorization", "Bearer "+w.stripe.APIKey()))
		if rec.Code != http.StatusOK {
			return fmt.Errorf("the refund is not made again: %d %s", rec.Code, rec.Body.Bytes())
		}
	case opAdyenRefund:
		w.adyen.SetNow(e.At)
		rec := httptest.NewRecorder()
		w.checkoutAPI.ServeHTTP(rec, w.apiRequest(e, "application/json", "X-API-Key", w.adyen.APIKey()))
		if rec.Code != http.StatusCreated {
			return fmt.Errorf("the refund is not taken again: %d %s", rec.Code, rec.Body.Bytes())
		}
	case opAdyenOutcome:
		w.adyen.SetNow(e.At)
		return catch(func() { w.adyen.RefundOutcome(e.Refund, true, "") })
	case opReceiverSecret:
		_, err := w.receiver.AddSecret(e.Secret)
		return err
	default:
		return fmt.Errorf("unknown change %q", e.Op)
	}
	return nil
}

func (w *World) apiRequest(e entry, contentType, authHeader, auth string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, e.Path, strings.NewReader(e.Body))
	r.Header.Set("Content-Type", contentType)
	r.Header.Set(authHeader, auth)
	if e.Key != "" {
		r.Header.Set("Idempotency-Key", e.Key)
	}
	return r
}

// catch turns a simulator's panic (a script asking what the provider would
// refuse) into an error.
func catch(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	f()
	return nil
}

// dayScript is what a day's story made.
type dayScript struct {
	stripeEvents  []stripesim.Event
	items         []adyensim.Item
	payments      []Payment
	refunds       []Refund
	doubleCharges []DoubleCharge
}

// script plays day's story on both simulators and returns what it made.
// The caller holds mu.
func (w *World) script(day time.Time) dayScript {
	before := len(w.stripe.Events())
	sp, sr, twice := stripeDay(w.stripe, w.shop, day)
	stripeEvents := w.stripe.Events()[before:]
	items, ap, ar := adyenDay(w.adyen, w.shop, day)
	w.shop.orders += ordersPerDay
	w.days = append(w.days, day.Format(time.DateOnly))
	now := w.cfg.Now()
	w.stripe.SetNow(now)
	w.adyen.SetNow(now)
	return dayScript{stripeEvents: stripeEvents, items: items, payments: slices.Concat(sp, ap),
		refunds: slices.Concat(sr, ar), doubleCharges: []DoubleCharge{twice}}
}

// DayReport is what PlayDay did.
type DayReport struct {
	Date     string    `json:"date"`
	Stripe   Delivery  `json:"stripe"`
	Adyen    Delivery  `json:"adyen"`
	Payments []Payment `json:"payments"`
	// Refunds are the refunds the day's story asks of paygate.
	Refunds []Refund `json:"refunds"`
	// DoubleCharges are the orders the day charges more than once, which
	// paygate detects; a refund among Refunds resolves each.
	DoubleCharges []DoubleCharge `json:"double_charges"`
}

// Delivery is how one provider's webhooks of the day went.
type Delivery struct {
	URL string `json:"url"`
	// Events counts the events sent (Adyen: notification items), Accepted
	// those paygate acknowledged, Duplicates those it already had.
	Events     int `json:"events"`
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
	// Failed describes the events paygate did not acknowledge.
	Failed []string `json:"failed"`
}

// PlayDay plays day's story (day is a UTC date) and delivers its webhooks
// to paygate: Stripe's events in the order Stripe created them, a few at
// a time, and Adyen's items one per request, as Adyen sends them. Playing
// a day again makes new payments, with new ids.
func (w *World) PlayDay(ctx context.Context, day time.Time) (DayReport, error) {
	w.mu.Lock()
	if err := w.journal.record(entry{Op: opDay, Date: day.Format(time.DateOnly)}); err != nil {
		w.mu.Unlock()
		return DayReport{}, err
	}
	sc := w.script(day)
	w.mu.Unlock()

	rep := DayReport{Date: day.Format(time.DateOnly), Payments: sc.payments, Refunds: sc.refunds, DoubleCharges: sc.doubleCharges,
		Stripe: Delivery{URL: w.cfg.GatewayURL + "/webhooks/stripe", Events: len(sc.stripeEvents), Failed: []string{}},
		Adyen:  Delivery{URL: w.cfg.GatewayURL + "/webhooks/adyen", Events: len(sc.items), Failed: []string{}},
	}
	results, err := w.stripe.Deliver(ctx, rep.Stripe.URL, sc.stripeEvents, &stripesim.DeliverOpts{
		Concurrency: 4, Client: w.cfg.Client, MaxAttempts: 3, Backoff: 200 * time.Millisecond,
	})
	if err != nil && !errors.Is(err, stripesim.ErrNotDelivered) {
		return rep, err
	}
	for _, r := range results {
		switch {
		case r.Delivered && r.Duplicate:
			rep.Stripe.Accepted++
			rep.Stripe.Duplicates++
		case r.Delivered:
			rep.Stripe.Accepted++
		default:
			rep.Stripe.Failed = append(rep.Stripe.Failed, describe(r.EventID, r.Status, r.Body, r.Err))
		}
	}
	for _, it := range sc.items {
		if err := w.deliverAdyen(ctx, it); err != nil {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			rep.Adyen.Failed = append(rep.Adyen.Failed, it.PspReference+":"+it.EventCode+": "+err.Error())
			continue
		}
		rep.Adyen.Accepted++
	}
	return rep, nil
}

func describe(id string, status int, body []byte, err error) string {
	if err != nil {
		return fmt.Sprintf("%s: %v", id, err)
	}
	return fmt.Sprintf("%s: %d %s", id, status, strings.TrimSpace(string(body)))
}

// deliverAdyen sends one item as Adyen does and checks paygate's
// "[accepted]".
func (w *World) deliverAdyen(ctx context.Context, it adyensim.Item) error {
	res, err := w.adyen.Deliver(ctx, w.cfg.GatewayURL+"/webhooks/adyen", w.cfg.AdyenBasicAuth, it)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	if res.StatusCode/100 != 2 || strings.TrimSpace(string(body)) != "[accepted]" {
		return fmt.Errorf("%d %s", res.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// Handler serves the world:
//
//	/v1/…                                 Stripe's API (internal/stripesim)
//	/checkout/v71/payments/{psp}/refunds  Adyen's Checkout refunds
//	POST /receiver                        the shop's endpoint for paygate's messages
//	GET  /demo                            what the world holds
//	POST /demo/days {"date"}              play a day (a DayReport)
//	POST /demo/receiver/secrets {"secret"} the endpoint's secret
//	GET  /demo/receiver                   what the endpoint received
//
// The /demo routes take the Stripe API key as a Bearer token.
func (w *World) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", http.HandlerFunc(w.serveStripe))
	mux.Handle(adyensim.CheckoutPath+"/", http.HandlerFunc(w.serveCheckout))
	mux.Handle(ReceiverPath, w.receiver)
	mux.Handle("GET /demo", w.control(w.serveInfo))
	mux.Handle("POST /demo/days", w.control(w.servePlay))
	mux.Handle("POST /demo/receiver/secrets", w.control(w.serveSecret))
	mux.Handle("GET /demo/receiver", w.control(func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, http.StatusOK, w.receiver.Stats())
	}))
	return mux
}

// serveStripe serves Stripe's API; a refund it makes is journaled, and its
// events are delivered to paygate once the answer is out, as Stripe sends
// them.
func (w *World) serveStripe(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/refunds" {
		w.stripeAPI.ServeHTTP(rw, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	w.mu.Lock()
	at := w.cfg.Now().UTC().Truncate(time.Second)
	w.stripe.SetNow(at)
	before := len(w.stripe.Events())
	w.stripeAPI.ServeHTTP(rw, r)
	fresh := w.stripe.Events()[before:]
	if len(fresh) > 0 {
		if err := w.journal.record(entry{Op: opStripeRefund, At: at, Path: r.URL.Path,
			Key: r.Header.Get("Idempotency-Key"), Body: string(body)}); err != nil {
			w.cfg.Logger.Error("demo: journal a Stripe refund", "error", err.Error())
		}
	}
	w.mu.Unlock()
	if len(fresh) > 0 {
		w.background(func(ctx context.Context) { w.deliverStripeLater(ctx, fresh) })
	}
}

// serveCheckout serves Adyen's Checkout refunds; a refund it takes is
// journaled, settled a moment later, and its REFUND delivered to paygate.
func (w *World) serveCheckout(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	w.mu.Lock()
	at := w.cfg.Now().Truncate(time.Second)
	w.adyen.SetNow(at)
	before := len(w.adyen.CheckoutRefunds())
	w.checkoutAPI.ServeHTTP(rw, r)
	taken := w.adyen.CheckoutRefunds()[before:]
	if len(taken) > 0 {
		if err := w.journal.record(entry{Op: opAdyenRefund, At: at, Path: r.URL.Path,
			Key: r.Header.Get("Idempotency-Key"), Body: string(body)}); err != nil {
			w.cfg.Logger.Error("demo: journal an Adyen refund", "error", err.Error())
		}
	}
	w.mu.Unlock()
	for _, t := range taken {
		psp := t.PspReference
		w.background(func(ctx context.Context) { w.settleAdyenLater(ctx, psp) })
	}
}

func (w *World) background(f func(ctx context.Context)) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f(w.ctx)
	}()
}

// webhookDelay is how long after a provider's answer its webhooks leave,
// and the first wait between retries; a provider retries for days, the
// world for a few minutes (then reconciliation recovers what was missed).
const (
	webhookDelay   = 300 * time.Millisecond
	webhookRetries = 8
)

func (w *World) deliverStripeLater(ctx context.Context, events []stripesim.Event) {
	if !sleep(ctx, webhookDelay) {
		return
	}
	_, err := w.stripe.Deliver(ctx, w.cfg.GatewayURL+"/webhooks/stripe", events, &stripesim.DeliverOpts{
		Client: w.cfg.Client, MaxAttempts: webhookRetries, Backoff: time.Second,
	})
	if err != nil && ctx.Err() == nil {
		w.cfg.Logger.Warn("demo: Stripe events of a refund not delivered", "error", err.Error())
	}
}

func (w *World) settleAdyenLater(ctx context.Context, refundPSP string) {
	if !sleep(ctx, webhookDelay) {
		return
	}
	w.mu.Lock()
	at := w.cfg.Now().Truncate(time.Second)
	w.adyen.SetNow(at)
	var it adyensim.Item
	err := catch(func() { it = w.adyen.RefundOutcome(refundPSP, true, "") })
	if err == nil {
		err = w.journal.record(entry{Op: opAdyenOutcome, At: at, Refund: refundPSP})
	}
	w.mu.Unlock()
	if err != nil {
		w.cfg.Logger.Error("demo: settle an Adyen refund", "refund", refundPSP, "error", err.Error())
		return
	}
	wait := time.Second
	for attempt := 1; ; attempt++ {
		err := w.deliverAdyen(ctx, it)
		if err == nil || attempt == webhookRetries || !sleep(ctx, wait) {
			if err != nil && ctx.Err() == nil {
				w.cfg.Logger.Warn("demo: Adyen REFUND not delivered", "refund", refundPSP, "error", err.Error())
			}
			return
		}
		wait *= 2
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// control guards the /demo routes with the Stripe API key.
func (w *World) control(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(key), []byte(w.stripe.APIKey())) != 1 {
			writeJSON(rw, http.StatusUnauthorized, map[string]string{"error": "the demo world takes its Stripe API key as a Bearer token"})
			return
		}
		h(rw, r)
	})
}

// Info is what GET /demo answers.
type Info struct {
	// World names what answers, so that a client knows it reached one.
	World       string   `json:"world"`
	ReceiverURL string   `json:"receiver_url"`
	Days        []string `json:"days"`
	GatewayURL  string   `json:"gateway_url"`
	// Orders is how many orders the shop has numbered: its last is
	// OrderReference(Orders), the next day's first OrderReference(Orders+1).
	Orders int `json:"orders"`
}

// WorldName is Info.World.
const WorldName = "paygate demo"

func (w *World) serveInfo(rw http.ResponseWriter, _ *http.Request) {
	w.mu.Lock()
	days, orders := slices.Clone(w.days), w.shop.orders
	w.mu.Unlock()
	if days == nil {
		days = []string{}
	}
	writeJSON(rw, http.StatusOK, Info{World: WorldName, ReceiverURL: w.ReceiverURL(), Days: days, GatewayURL: w.cfg.GatewayURL,
		Orders: orders})
}

func (w *World) servePlay(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		Date string `json:"date"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&req); err != nil {
		writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "the body is {\"date\":\"YYYY-MM-DD\"}"})
		return
	}
	day, err := time.Parse(time.DateOnly, req.Date)
	if err != nil || day.After(w.cfg.Now().UTC()) {
		writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "date is a UTC day that has begun, YYYY-MM-DD"})
		return
	}
	rep, err := w.PlayDay(r.Context(), day)
	if err != nil {
		writeJSON(rw, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(rw, http.StatusOK, rep)
}

func (w *World) serveSecret(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		Secret string `json:"secret"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&req); err != nil {
		writeJSON(rw, http.StatusBadRequest, map[string]string{"error": "the body is {\"secret\":\"whsec_…\"}"})
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	added, err := w.receiver.AddSecret(req.Secret)
	if err != nil {
		writeJSON(rw, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if !added {
		rw.WriteHeader(http.StatusNoContent)
		return
	}
	if err := w.journal.record(entry{Op: opReceiverSecret, Secret: req.Secret}); err != nil {
		writeJSON(rw, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	enc := json.NewEncoder(rw)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
