package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paygate/paygate/internal/stripesim"
)

// Delivery is one copy of one event to send.
type Delivery struct {
	Event stripesim.Event
	Copy  int
}

// Attempt is one HTTP request of a delivery.
type Attempt struct {
	Start     time.Time
	Latency   time.Duration
	Target    string
	Status    int    // 0: no response
	Err       string // transport error, if any
	Duplicate bool   // the 2xx body said duplicate:true
}

// Acked reports a 2xx.
func (a Attempt) Acked() bool { return a.Status >= 200 && a.Status < 300 }

// Outcome is what happened to one delivery.
type Outcome struct {
	Delivery
	Attempts []Attempt
}

// Acked reports whether any attempt got a 2xx (the sender stops at the
// first).
func (o Outcome) Acked() bool {
	return len(o.Attempts) > 0 && o.Attempts[len(o.Attempts)-1].Acked()
}

// Sender delivers events as a provider does: the raw payload, a fresh
// Stripe-Signature per attempt, and a retry with capped backoff for every
// attempt that got no 2xx (no response, 5xx, even 4xx), until it is
// acknowledged or the context ends. Unlike stripesim.Deliver it never gives
// up on its own: nothing may be left unacknowledged by the harness itself.
type Sender struct {
	Secret string
	// Targets returns the webhook URLs to spread attempts over (a load
	// balancer in front of the instances); asked on every attempt.
	Targets     func() []string
	Concurrency int           // default 8
	Timeout     time.Duration // per request; default 15s
	Backoff     time.Duration // first retry wait; default 50ms, doubled to MaxBackoff
	MaxBackoff  time.Duration // default 1s
	// Rate caps new deliveries per second (0: no cap), so a load can be
	// made to last through a fault schedule.
	Rate float64
	Seed uint64

	sent  atomic.Int64
	acked atomic.Int64
	mu    sync.Mutex
	ids   map[string]bool // events acknowledged so far
}

// AckedIDs returns the events acknowledged so far.
func (s *Sender) AckedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.ids))
	for id := range s.ids {
		out = append(out, id)
	}
	return out
}

// Progress returns how many deliveries were started and acknowledged.
func (s *Sender) Progress() (started, acked int64) { return s.sent.Load(), s.acked.Load() }

// Plan makes the deliveries of events: each event copies times, 1 to
// maxCopies drawn per event, in a shuffled order.
func Plan(events []stripesim.Event, maxCopies int, rng *mrand.Rand) []Delivery {
	var plan []Delivery
	for _, ev := range events {
		n := 1 + rng.IntN(max(maxCopies, 1))
		for c := 1; c <= n; c++ {
			plan = append(plan, Delivery{Event: ev, Copy: c})
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}

// Run delivers plan and returns one outcome per delivery, in plan order. It
// returns when every delivery is acknowledged or ctx ends.
func (s *Sender) Run(ctx context.Context, plan []Delivery) []Outcome {
	conc := s.Concurrency
	if conc <= 0 {
		conc = 8
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	client := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: conc,
			IdleConnTimeout:     30 * time.Second,
		},
	}
	defer client.CloseIdleConnections()

	out := make([]Outcome, len(plan))
	work := make(chan int)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(s.Seed, uint64(w)+1))
			for i := range work {
				out[i] = s.deliver(ctx, client, plan[i], rng)
			}
		}()
	}
	var tick <-chan time.Time
	if s.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / s.Rate))
		defer t.Stop()
		tick = t.C
	}
feed:
	for i := range plan {
		if tick != nil {
			select {
			case <-tick:
			case <-ctx.Done():
				break feed
			}
		}
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	for i := range out {
		if out[i].Event.ID == "" {
			out[i].Delivery = plan[i] // never started: ctx ended first
		}
	}
	return out
}

func (s *Sender) deliver(ctx context.Context, client *http.Client, d Delivery, rng *mrand.Rand) Outcome {
	s.sent.Add(1)
	o := Outcome{Delivery: d}
	backoff := s.Backoff
	if backoff <= 0 {
		backoff = 50 * time.Millisecond
	}
	maxBackoff := s.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = time.Second
	}
	for ctx.Err() == nil {
		targets := s.Targets()
		target := targets[rng.IntN(len(targets))]
		a := s.attempt(ctx, client, target, d.Event.Payload)
		o.Attempts = append(o.Attempts, a)
		if a.Acked() {
			s.acked.Add(1)
			s.mu.Lock()
			if s.ids == nil {
				s.ids = map[string]bool{}
			}
			s.ids[d.Event.ID] = true
			s.mu.Unlock()
			return o
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff/2 + time.Duration(rng.Int64N(int64(backoff)))):
		}
		backoff = min(2*backoff, maxBackoff)
	}
	return o
}

func (s *Sender) attempt(ctx context.Context, client *http.Client, target string, payload []byte) (a Attempt) {
	a = Attempt{Start: time.Now(), Target: target}
	defer func() { a.Latency = time.Since(a.Start) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(payload))
	if err != nil {
		a.Err = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set(stripesim.SignatureHeader, stripesim.Sign(payload, s.Secret, time.Now(), nil))
	resp, err := client.Do(req)
	if err != nil {
		a.Err = classify(err)
		return a
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		// The answer was cut: the provider never saw a 2xx and retries.
		a.Err = classify(err)
		return a
	}
	a.Status = resp.StatusCode
	if a.Acked() {
		var ack struct {
			Received  bool `json:"received"`
			Duplicate bool `json:"duplicate"`
		}
		if json.Unmarshal(body, &ack) != nil || !ack.Received {
			a.Status, a.Err = 0, fmt.Sprintf("2xx without a receipt: %.80q", body)
			return a
		}
		a.Duplicate = ack.Duplicate
	}
	return a
}

// classify names a transport error without its addresses, for the tally.
func classify(err error) string {
	var to interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &to) && to.Timeout():
		return "timeout"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection closed"
	default:
		for _, k := range []string{"connection refused", "connection reset", "broken pipe", "EOF"} {
			if strings.Contains(err.Error(), k) {
				return k
			}
		}
		return "transport error"
	}
}
