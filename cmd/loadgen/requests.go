package main

import (
	"bufio"
	"bytes"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/paygate/paygate/internal/stripesim"
)

// delivery is one simulated Stripe event.
type delivery struct {
	id      string
	created int64 // Unix seconds, as the payload says
	payload []byte
}

// eventsPerPayment is about how many events a payment of generate's mix
// makes (two, and four more for a tenth of them).
const eventsPerPayment = 2.4

// distinctEvents returns n distinct events of the usual mix from a new
// simulator with a random seed, so that no two runs, levels or instances
// send the same event id (paygate would answer it as a duplicate).
func distinctEvents(n int, refundShare float64) []delivery {
	return distinctEventsAt(n, refundShare, time.Time{})
}

// distinctEventsAt is distinctEvents with every event created at at (now
// when zero).
func distinctEventsAt(n int, refundShare float64, at time.Time) []delivery {
	sim := stripesim.New(stripesim.Config{WebhookSecret: "unused", Now: at})
	rng := mrand.New(mrand.NewPCG(uint64(sim.Seed()), 0xbe5c4))
	var out []delivery
	for len(out) < n {
		out = append(out, generate(sim, rng, int(float64(n-len(out))/eventsPerPayment)+1, refundShare)...)
	}
	return out[:n]
}

// generate scripts payments of the benchmarks' mix (stripesim.PayMix) and
// returns their events, shuffled: Stripe promises no order, and
// interleaving spreads the payments' locks.
func generate(sim *stripesim.Sim, rng *mrand.Rand, payments int, refundShare float64) []delivery {
	all := sim.PayMix(rng, payments, refundShare)
	out := make([]delivery, len(all))
	for i, e := range all {
		out[i] = delivery{id: e.ID, created: e.Created.Unix(), payload: e.Payload}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// stampedEvents is distinctEvents created as they are expected to be
// sent, from start at pace events a second: each second's share is made
// with the simulator's clock at that second, and comes before the next
// second's in every thread's file (wrk sends a file in order). Each
// second's share is shuffled on its own, a payment's events staying
// within it.
func stampedEvents(n int, refundShare float64, start time.Time, pace float64) []delivery {
	perSecond := max(1, int(pace))
	out := make([]delivery, 0, n)
	for at := start; len(out) < n; at = at.Add(time.Second) {
		out = append(out, distinctEventsAt(min(perSecond, n-len(out)), refundShare, at)...)
	}
	return out
}

// request serializes d as the HTTP/1.1 request Stripe would send to
// target, signed with secret at the time at.
func request(d delivery, secret string, target *url.URL, at time.Time) []byte {
	sig := stripesim.SignedRequest(d.payload, secret, at)
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nUser-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
		target.RequestURI(), target.Host, stripesim.SignatureHeader, sig, len(d.payload))
	b.Write(d.payload)
	return b.Bytes()
}

// writeRequests signs every delivery now and writes them for
// scripts/bench.lua: prefix.0 … prefix.<threads-1>, delivery i in the file
// of thread i%threads, each record its length in eight digits then the
// request. It removes the done markers of an earlier run with the prefix.
func writeRequests(prefix string, ds []delivery, threads int, secret string, target *url.URL) error {
	if err := os.MkdirAll(filepath.Dir(prefix), 0o755); err != nil {
		return err
	}
	now := time.Now()
	for t := range threads {
		_ = os.Remove(fmt.Sprintf("%s.done.%d", prefix, t))
		f, err := os.Create(fmt.Sprintf("%s.%d", prefix, t))
		if err != nil {
			return err
		}
		w := bufio.NewWriterSize(f, 1<<20)
		for i := t; i < len(ds); i += threads {
			req := request(ds[i], secret, target, now)
			if len(req) > 99_999_999 {
				f.Close()
				return fmt.Errorf("event %s: request of %d bytes", ds[i].id, len(req))
			}
			fmt.Fprintf(w, "%08d", len(req))
			w.Write(req)
		}
		if err := w.Flush(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
