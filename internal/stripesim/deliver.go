package stripesim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// ErrNotDelivered is returned by Deliver when at least one delivery ended
// without a 2xx answer after all its attempts.
var ErrNotDelivered = errors.New("stripesim: event not delivered")

// DeliverOpts tunes Deliver. The zero value sends each event once, in order,
// one at a time, signed now with the Sim's secret.
type DeliverOpts struct {
	// Copies is how many times each event is sent (≤ 1: once), as Stripe's
	// at-least-once delivery may.
	Copies int
	// RandomCopies sends each event a random 1..Copies times instead.
	RandomCopies bool
	// Shuffle sends in a random order (copies interleaved) instead of
	// creation order.
	Shuffle bool
	// Seed drives Shuffle and RandomCopies; zero uses the Sim's seed.
	Seed int64
	// Concurrency is how many deliveries are in flight at once (≤ 1: one).
	Concurrency int
	// Skip leaves these event ids out, besides those marked with SkipEvent.
	Skip []string
	// Secret signs with this instead of the Sim's webhook secret (a wrong
	// or a rotated-out secret).
	Secret string
	// Signature adds extra v1 or v0 signatures to the header.
	Signature *SignOpts
	// Now is the signature timestamp of each attempt; the wall clock by
	// default, not the Sim's clock, since the receiver checks the tolerance
	// against its own. Set it to send stale or future signatures.
	Now func() time.Time
	// MaxAttempts bounds the attempts per delivery (default 3); Stripe
	// retries any answer that is not 2xx, and so does Deliver.
	MaxAttempts int
	// Backoff is the wait before the first retry, doubled after each
	// (default 10ms).
	Backoff time.Duration
	// Client sends the requests; a client with a 10s timeout by default.
	Client *http.Client
}

// DeliveryResult is the outcome of one delivery: one copy of one event and
// its retries.
type DeliveryResult struct {
	EventID string
	Type    EventType
	// Copy numbers the copies of an event from 1.
	Copy int
	// StatusCodes has one entry per attempt; 0 when no response came.
	StatusCodes []int
	// Status is the last attempt's status code (0: none).
	Status int
	// Delivered is true when the last attempt got a 2xx.
	Delivered bool
	// Duplicate is the "duplicate" field of paygate's
	// {"received":true,"duplicate":bool} answer.
	Duplicate bool
	// Body is the last response body.
	Body []byte
	// Err is the last attempt's transport error, or the context's error for
	// a delivery never attempted.
	Err error
}

var defaultDeliverClient = &http.Client{Timeout: 10 * time.Second}

type delivery struct {
	ev   Event
	copy int
}

// Deliver POSTs events to endpointURL as Stripe's webhook sender does: the
// raw payload with Content-Type application/json and a fresh
// Stripe-Signature per attempt, retrying an attempt that got no 2xx. Events
// marked with SkipEvent or listed in opts.Skip are not sent.
//
// It returns one result per delivery, in the order the deliveries were
// planned (which, with Concurrency > 1, need not be the order they finished).
// The error wraps ErrNotDelivered when a delivery never got a 2xx, or is the
// context's error when ctx ended first; the results are complete either way.
func (s *Sim) Deliver(ctx context.Context, endpointURL string, events []Event, opts *DeliverOpts) ([]DeliveryResult, error) {
	var o DeliverOpts
	if opts != nil {
		o = *opts
	}
	if o.Secret == "" {
		o.Secret = s.secret
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	if o.Backoff <= 0 {
		o.Backoff = 10 * time.Millisecond
	}
	if o.Client == nil {
		o.Client = defaultDeliverClient
	}
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	seed := o.Seed
	if seed == 0 {
		seed = s.seed
	}
	rng := mrand.New(mrand.NewPCG(uint64(seed), 0xda3e39cb94b95bdb))

	skip := make(map[string]bool, len(o.Skip))
	for _, id := range o.Skip {
		skip[id] = true
	}
	var plan []delivery
	for _, ev := range events {
		if skip[ev.ID] || s.isSkipped(ev.ID) {
			continue
		}
		n := max(o.Copies, 1)
		if o.RandomCopies && n > 1 {
			n = 1 + rng.IntN(n)
		}
		for c := 1; c <= n; c++ {
			plan = append(plan, delivery{ev: ev, copy: c})
		}
	}
	if o.Shuffle {
		rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	}

	results := make([]DeliveryResult, len(plan))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(o.Concurrency, max(len(plan), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = deliverOne(ctx, endpointURL, plan[i], &o)
			}
		}()
	}
	for i := range plan {
		work <- i
	}
	close(work)
	wg.Wait()

	if err := ctx.Err(); err != nil {
		return results, fmt.Errorf("deliver to %s: %w", endpointURL, err)
	}
	failed := 0
	for _, r := range results {
		if !r.Delivered {
			failed++
		}
	}
	if failed > 0 {
		return results, fmt.Errorf("deliver to %s: %d of %d deliveries got no 2xx: %w", endpointURL, failed, len(results), ErrNotDelivered)
	}
	return results, nil
}

func deliverOne(ctx context.Context, url string, d delivery, o *DeliverOpts) DeliveryResult {
	r := DeliveryResult{EventID: d.ev.ID, Type: d.ev.Type, Copy: d.copy}
	wait := o.Backoff
	for attempt := 1; attempt <= o.MaxAttempts; attempt++ {
		if err := ctx.Err(); err != nil {
			r.Err = err
			return r
		}
		status, body, err := post(ctx, o.Client, url, d.ev.Payload, Sign(d.ev.Payload, o.Secret, o.Now(), o.Signature))
		r.StatusCodes = append(r.StatusCodes, status)
		r.Status, r.Body, r.Err = status, body, err
		if err == nil && status >= 200 && status < 300 {
			r.Delivered = true
			var ack struct {
				Duplicate bool `json:"duplicate"`
			}
			if json.Unmarshal(body, &ack) == nil {
				r.Duplicate = ack.Duplicate
			}
			return r
		}
		if attempt == o.MaxAttempts {
			break
		}
		select {
		case <-ctx.Done():
			r.Err = ctx.Err()
			return r
		case <-time.After(wait):
		}
		wait *= 2
	}
	return r
}

func post(ctx context.Context, client *http.Client, url string, payload []byte, sig string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Cache-Control", "no-cache")
	req.Header.Set(SignatureHeader, sig)
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("post: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return res.StatusCode, body, fmt.Errorf("read response: %w", err)
	}
	return res.StatusCode, body, nil
}
