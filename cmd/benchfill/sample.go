package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/migrations"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

// sampleEvents scripts payments of make bench's mix on the simulator
// (stripesim.PayMix's amounts and currencies, a receipt email each,
// refundShare of them refunded in full), each for an order of the shop's
// (metadata order_id, and a description) and most for a customer the shop
// keeps, with paidTwice of the orders paid twice (a shopper paying again
// after a timeout), so that the filled database holds what the benchmark
// itself would have left and the references a search finds. The orders,
// customers and emails are shaped as the provider's ids are, so that each
// copy of a payment gets its own (see idPattern) and a lookup finds one
// payment, or the two of an order paid twice, however many copies there
// are. The customers' own events (customer.created) are left out: paygate
// ignores them, and a sample holds applied events only.
func sampleEvents(payments int, paidTwice float64, seed uint64) ([]webhook.Event, error) {
	sim := stripesim.New(stripesim.Config{WebhookSecret: "unused", Seed: int64(seed)})
	rng := mrand.New(mrand.NewPCG(seed, 0xf111))
	currencies := []string{"usd", "usd", "usd", "eur", "gbp", "jpy"}
	for made := 0; made < payments; made++ {
		order := stampable("ord", rng)
		opts := stripesim.PayOpts{
			Amount:      int64(500 + rng.IntN(50000)),
			Currency:    currencies[rng.IntN(len(currencies))],
			Email:       stampable("c", rng) + "@example.com",
			OrderID:     order,
			Description: "Order " + order,
		}
		if rng.Float64() < 0.7 {
			opts.Customer = sim.CreateCustomer(stripesim.CustomerOpts{Email: opts.Email})
		}
		p := sim.Pay(opts)
		if rng.Float64() < 0.1 {
			sim.Refund(p, 0)
		}
		if made+1 < payments && rng.Float64() < paidTwice {
			sim.Pay(opts)
			made++
		}
	}
	var out []webhook.Event
	for _, e := range sim.Events() {
		if e.Type == stripesim.EventCustomerCreated {
			continue
		}
		ev, err := stripe.DecodeEvent(e.Payload)
		if err != nil {
			return nil, fmt.Errorf("simulator event %s: %w", e.ID, err)
		}
		out = append(out, ev)
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

// stampable is an id of prefix shaped as the provider's (idPattern), so
// that every copy of the payment naming it names one of its own.
func stampable(prefix string, rng *mrand.Rand) string {
	b := []byte(prefix + "_")
	for range 24 {
		b = append(b, stampAlphabet[rng.IntN(len(stampAlphabet))])
	}
	return string(b)
}

// withDatabase returns rawURL naming database name instead of its own.
func withDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// applySample creates a scratch database next to the target, migrates it,
// ingests events through the webhook ingester and lets the real River
// workers apply them, and returns its pool; drop removes the database.
// Reading back what paygate wrote there is what keeps the filled rows in
// paygate's own shapes as they change.
func applySample(ctx context.Context, targetURL string, events []webhook.Event, logf func(string, ...any)) (pool *pgxpool.Pool, drop func(), err error) {
	name := fmt.Sprintf("benchfill_sample_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, targetURL)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, nil, fmt.Errorf("create sample database: %w", err)
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if pool != nil {
			pool.Close()
		}
		c, err := pgx.Connect(ctx, targetURL)
		if err != nil {
			logf("drop sample database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			logf("drop sample database %s: %v", name, err)
		}
	}
	fail := func(err error) (*pgxpool.Pool, func(), error) {
		drop()
		return nil, nil, err
	}
	sampleURL, err := withDatabase(targetURL, name)
	if err != nil {
		return fail(err)
	}
	cfg, err := pgxpool.ParseConfig(sampleURL)
	if err != nil {
		return fail(fmt.Errorf("parse sample url: %w", err))
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(fmt.Errorf("open sample database: %w", err))
	}
	if err := migrations.Migrate(ctx, pool, nil); err != nil {
		return fail(fmt.Errorf("migrate sample database: %w", err))
	}
	client, err := jobs.NewClient(pool, jobs.Config{
		Logger:            slog.New(slog.DiscardHandler),
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Email:             jobs.EmailConfig{From: "paygate@example.com"},
	})
	if err != nil {
		return fail(err)
	}
	if err := client.River.Start(ctx); err != nil {
		return fail(fmt.Errorf("start river: %w", err))
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := client.River.Stop(sctx); err != nil {
			logf("stop river: %v", err)
		}
	}
	defer stop()
	ingester := &webhook.TxIngester{Pool: pool, Enqueue: client}
	for _, e := range events {
		if _, err := ingester.Ingest(ctx, e); err != nil {
			return fail(fmt.Errorf("ingest sample event %s: %w", e.ID, err))
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var waiting, unsent int64
		err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM inbox_events WHERE status = 'received'),
			(SELECT count(*) FROM email_outbox WHERE status = 'pending')`).Scan(&waiting, &unsent)
		if err != nil {
			return fail(fmt.Errorf("wait for the sample: %w", err))
		}
		if waiting == 0 && unsent == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("sample not applied after 3 minutes: %d events received, %d emails pending", waiting, unsent))
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	counts, err := inbox.Counts(ctx, pool)
	if err != nil {
		return fail(err)
	}
	var bad []string
	for _, s := range inbox.Statuses {
		if s != inbox.StatusProcessed && counts[s] > 0 {
			bad = append(bad, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	if len(bad) > 0 {
		return fail(errors.New("sample events not all processed: " + strings.Join(bad, ", ")))
	}
	return pool, drop, nil
}
