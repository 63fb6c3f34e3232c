package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/paygate/paygate/jobs"
)

// The peers are the Stripe webhook gateway a team writes in an afternoon,
// measured beside paygate with the same wrk and the same events: net/http,
// stripe-go's own signature check, a pool of 32 connections with pgx's
// prepared statements, and one transaction per webhook, answered once it
// commits. They are written as such a team would write them well, with no
// round trip a statement could save, so that paygate is set against a
// gateway worth having rather than a straw man.
//
//	store  keeps the event and a job row for a worker (the worker is not
//	       part of it): what paygate's ingest does.
//	sync   applies the event before answering: the event, the payment's
//	       state, and the capture's ledger transaction, in the webhook's
//	       transaction: what paygate does end to end.
//
// Two more modes are no peers but limits, grouped only: contract writes
// what paygate's contract writes for an event (peer_contract.go), inbox
// what paygate's ingest writes (peer_inbox.go).
const (
	peerStore = "store"
	peerSync  = "sync"
)

// peerPoolSize is the peer's pool: the pgbench anchors' 32 clients.
const peerPoolSize = 32

// peerSchema creates the peer's tables when missing. A capture's ledger
// transaction is unique by payment, so that a payment's two capture
// events (charge.succeeded and payment_intent.succeeded) post it once.
const peerSchema = `
CREATE TABLE IF NOT EXISTS events (
    id          text PRIMARY KEY,
    type        text NOT NULL,
    payload     jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS jobs (
    id         bigserial PRIMARY KEY,
    event_id   text NOT NULL,
    state      text NOT NULL DEFAULT 'available',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS payments (
    id              text PRIMARY KEY,
    status          text NOT NULL,
    amount_captured bigint NOT NULL DEFAULT 0,
    currency        text NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ledger_transactions (
    id         bigserial PRIMARY KEY,
    payment_id text NOT NULL,
    kind       text NOT NULL,
    event_id   text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (payment_id, kind)
);
CREATE TABLE IF NOT EXISTS ledger_entries (
    id             bigserial PRIMARY KEY,
    transaction_id bigint NOT NULL REFERENCES ledger_transactions (id),
    account        text NOT NULL,
    direction      text NOT NULL CHECK (direction IN ('debit', 'credit')),
    amount         numeric NOT NULL CHECK (amount > 0),
    currency       text NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_entries_transaction_id ON ledger_entries (transaction_id);
CREATE TABLE IF NOT EXISTS grouped_events (
    id          text PRIMARY KEY,
    type        text NOT NULL,
    payload     bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
`

// peerCommand serves a peer until SIGTERM or SIGINT.
func peerCommand(args []string) error {
	fs := flag.NewFlagSet("peer", flag.ExitOnError)
	mode := fs.String("mode", peerStore, "store (the event and a job row), sync (the event applied before answering), contract (with -group: every row paygate writes for an event, in a database paygate migrated) or inbox (with -group: the rows paygate's ingest writes, in such a database)")
	addr := fs.String("addr", "127.0.0.1:18095", "listen address")
	databaseURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "the database; the peer's tables go in -schema")
	schema := fs.String("schema", "peer", "the schema of the peer's tables, created when missing")
	secret := fs.String("secret", "", "the Stripe webhook signing secret")
	group := fs.Bool("group", false, "write the webhooks that wait together in one transaction: the least work, not the obvious design (peer_group.go)")
	groupers := fs.Int("groupers", 0, "with -group: the transactions at once (default: 2 for contract, 8 for inbox, else 4)")
	endpoint := fs.String("endpoint", "", "with -mode contract: deliver each message once, signed, to this URL (peer_endpoint.go)")
	_ = fs.Parse(args)
	switch {
	case *endpoint != "" && *mode != peerContract:
		return errors.New("-endpoint: only with -mode contract")
	case *groupers < 0 || (*groupers > 0 && !*group):
		return errors.New("-groupers: a positive count, with -group")
	}
	ctx := context.Background()
	p, err := newPeer(ctx, *mode, *databaseURL, *schema, *secret)
	if err != nil {
		return err
	}
	defer p.db.Close()
	p.groupers = *groupers
	switch {
	case *group:
		if *endpoint != "" {
			if err := p.startEndpoint(ctx, *endpoint); err != nil {
				return err
			}
		}
		p.startGroupers(ctx)
	case *mode == peerContract || *mode == peerInbox:
		return fmt.Errorf("-mode %s: only with -group (the least work for paygate's rows)", *mode)
	}
	srv := &http.Server{Addr: *addr, Handler: p.handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "loadgen: %s peer on %s (schema %s)\n", *mode, *addr, *schema)
	return serveUntilSignal(srv.ListenAndServe, srv.Shutdown)
}

type peer struct {
	mode   string
	secret string
	db     *pgxpool.Pool
	// waiting is set on a grouped peer: the webhooks for its groupers.
	waiting chan *groupedEvent
	// emails are a contract peer's receipt emails, for its marker.
	emails chan []int64
	// jobs inserts an inbox peer's apply_events jobs.
	jobs *jobs.Client
	// endpoint is a contract peer's endpoint, when it has one.
	endpoint *peerEndpoint
	// groupers overrides a grouped peer's transactions at once (0: its
	// mode's).
	groupers int
}

func newPeer(ctx context.Context, mode, databaseURL, schema, secret string) (*peer, error) {
	if mode != peerStore && mode != peerSync && mode != peerContract && mode != peerInbox {
		return nil, fmt.Errorf("-mode %q: store, sync, contract or inbox", mode)
	}
	if secret == "" {
		return nil, errors.New("-secret is required")
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("-database-url: %w", err)
	}
	cfg.MaxConns = peerPoolSize
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if mode == peerContract || mode == peerInbox {
		if err := checkPaygateTables(ctx, db, mode); err != nil {
			db.Close()
			return nil, err
		}
		p := &peer{mode: mode, secret: secret, db: db}
		if mode == peerInbox {
			if p.jobs, err = jobs.NewClient(db, jobs.Config{InsertOnly: true}); err != nil {
				db.Close()
				return nil, err
			}
		}
		return p, nil
	}
	if _, err := db.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		db.Close()
		return nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	if _, err := db.Exec(ctx, peerSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("create the peer's tables: %w", err)
	}
	return &peer{mode: mode, secret: secret, db: db}, nil
}

func (p *peer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/stripe", p.webhook)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	// /count: the events stored, for loadgen run -peer to check that every
	// event answered 200 is in the database.
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		var n int64
		table := "events"
		switch {
		case p.mode == peerContract || p.mode == peerInbox:
			table = "inbox_events"
		case p.waiting != nil:
			table = "grouped_events"
		}
		if err := p.db.QueryRow(r.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			http.Error(w, "count failed", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, strconv.FormatInt(n, 10)+"\n")
	})
	// /delivered, /undelivered and /pending: a contract peer's messages
	// its endpoint answered 2xx, not, and not yet; /last-delivered: when
	// the latest was answered (Unix microseconds); for loadgen run.
	for path, n := range map[string]func(*peerEndpoint) int64{
		"/delivered":      func(e *peerEndpoint) int64 { return e.delivered.Load() },
		"/undelivered":    func(e *peerEndpoint) int64 { return e.failed.Load() },
		"/pending":        (*peerEndpoint).pending,
		"/last-delivered": func(e *peerEndpoint) int64 { return e.last.Load() },
	} {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			if p.endpoint == nil {
				http.Error(w, "no endpoint", http.StatusNotFound)
				return
			}
			io.WriteString(w, strconv.FormatInt(n(p.endpoint), 10)+"\n")
		})
	}
	return mux
}

func (p *peer) webhook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "could not read the request body", http.StatusBadRequest)
		return
	}
	var id string
	if p.waiting != nil {
		id, err = p.submit(r.Context(), body, r.Header.Get("Stripe-Signature"))
	} else {
		var ev stripego.Event
		if ev, err = webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), p.secret); err != nil {
			err = &invalidEventError{"invalid signature"}
		} else {
			id, err = ev.ID, p.store(r.Context(), ev, body)
		}
	}
	var invalid *invalidEventError
	switch {
	case errors.As(err, &invalid):
		http.Error(w, invalid.Error(), http.StatusBadRequest)
		return
	case err != nil:
		fmt.Fprintf(os.Stderr, "loadgen: peer: event %s: %v\n", id, err)
		http.Error(w, "could not store the event", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"received":true}`)
}

// store keeps the event in a transaction of its own: with a job row, or
// applied.
func (p *peer) store(ctx context.Context, ev stripego.Event, body []byte) error {
	return pgx.BeginFunc(ctx, p.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO events (id, type, payload) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			ev.ID, string(ev.Type), body)
		if err != nil {
			return fmt.Errorf("store the event: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // a duplicate, stored and handled the first time
		}
		if p.mode == peerStore {
			if _, err := tx.Exec(ctx, `INSERT INTO jobs (event_id) VALUES ($1)`, ev.ID); err != nil {
				return fmt.Errorf("insert the job: %w", err)
			}
			return nil
		}
		return apply(ctx, tx, ev)
	})
}

// paymentObject is what the sync peer reads of a payment_intent or a
// charge.
type paymentObject struct {
	ID             string  `json:"id"`
	Object         string  `json:"object"`
	Status         string  `json:"status"`
	Currency       string  `json:"currency"`
	AmountReceived int64   `json:"amount_received"` // payment_intent
	AmountCaptured int64   `json:"amount_captured"` // charge
	PaymentIntent  *string `json:"payment_intent"`  // charge
	Refunded       bool    `json:"refunded"`        // charge
}

// paymentChange is what one event says of its payment, as the sync peer
// applies it.
type paymentChange struct {
	payment, status, currency string
	captured                  int64
	capture                   bool // the event is the payment's capture
}

// changeOf reads the payment change of a payment_intent or charge event;
// ok is false for other events, which are kept and not applied.
func changeOf(eventType string, object json.RawMessage) (c paymentChange, ok bool, err error) {
	if object == nil {
		return c, false, nil
	}
	var o paymentObject
	if err := json.Unmarshal(object, &o); err != nil {
		return c, false, fmt.Errorf("decode data.object: %w", err)
	}
	c, ok = changeFrom(eventType, o)
	return c, ok, nil
}

// changeFrom is changeOf of an object already read.
func changeFrom(eventType string, o paymentObject) (c paymentChange, ok bool) {
	c = paymentChange{payment: o.ID, status: o.Status, currency: o.Currency, captured: o.AmountReceived}
	switch o.Object {
	case "payment_intent":
	case "charge":
		if o.PaymentIntent == nil {
			return c, false
		}
		c.payment, c.captured = *o.PaymentIntent, o.AmountCaptured
		if o.Refunded {
			c.status = "refunded"
		}
	default:
		return c, false
	}
	c.capture = (eventType == "charge.succeeded" || eventType == "payment_intent.succeeded") && c.captured > 0
	return c, true
}

// apply upserts the payment of a payment_intent or charge event and, on
// its capture, posts the ledger transaction once.
func apply(ctx context.Context, tx pgx.Tx, ev stripego.Event) error {
	if ev.Data == nil {
		return nil
	}
	c, ok, err := changeOf(string(ev.Type), ev.Data.Raw)
	if err != nil || !ok {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO payments (id, status, amount_captured, currency) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET status = CASE WHEN payments.status = 'refunded' THEN payments.status ELSE excluded.status END,
			amount_captured = greatest(payments.amount_captured, excluded.amount_captured), updated_at = now()`,
		c.payment, c.status, c.captured, c.currency); err != nil {
		return fmt.Errorf("upsert payment %s: %w", c.payment, err)
	}
	if !c.capture {
		return nil
	}
	// One statement: the transaction, unless the payment's other capture
	// event posted it, and its two entries.
	_, err = tx.Exec(ctx, `WITH t AS (
			INSERT INTO ledger_transactions (payment_id, kind, event_id) VALUES ($1, 'capture', $2)
			ON CONFLICT (payment_id, kind) DO NOTHING RETURNING id)
		INSERT INTO ledger_entries (transaction_id, account, direction, amount, currency)
		SELECT t.id, e.account, e.direction, $3::bigint::numeric, $4 FROM t,
			(VALUES ('cash', 'debit'), ('revenue', 'credit')) AS e (account, direction)`,
		c.payment, ev.ID, c.captured, c.currency)
	if err != nil {
		return fmt.Errorf("post the capture of %s: %w", c.payment, err)
	}
	return nil
}
