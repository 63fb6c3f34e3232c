package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"sync/atomic"
	"time"

	paygatedelivery "github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/outbox"
)

// A contract peer with an endpoint (loadgen peer -mode contract -group
// -endpoint URL) also delivers each message its groups commit, the least
// work for what paygate promises an endpoint: one signed POST a message
// by paygate's own delivery.Sender (Standard Webhooks headers, the SSRF
// guard's dialer, one attempt), a payment's messages one after the other
// and different payments' in parallel, over DefaultMaxInFlight
// connections kept alive. It keeps no delivery row, no attempt, no place
// in the feed and no retry: a message it could not deliver is counted and
// lost, which is what paygate's dispatcher exists to avoid. Its rate
// against the same peer without the endpoint is the limit for paygate's
// "one endpoint attached" ratio on this machine.
type peerEndpoint struct {
	url     string
	secrets []string
	sender  *paygatedelivery.Sender
	lanes   []chan outbox.Message
	// handed, delivered and failed count the messages given to the lanes,
	// answered 2xx, and not (an error or another status).
	handed, delivered, failed atomic.Int64
	// last is when the latest delivery was answered, in Unix
	// microseconds.
	last atomic.Int64
}

// startEndpoint starts the lanes that deliver to url.
func (p *peer) startEndpoint(ctx context.Context, url string) error {
	secret, err := paygatedelivery.NewSecret()
	if err != nil {
		return err
	}
	e := &peerEndpoint{
		url: url, secrets: []string{secret},
		sender: paygatedelivery.NewSender(paygatedelivery.SenderConfig{Guard: paygatedelivery.GuardConfig{AllowPrivate: true}}),
		lanes:  make([]chan outbox.Message, paygatedelivery.DefaultMaxInFlight),
	}
	for i := range e.lanes {
		e.lanes[i] = make(chan outbox.Message, maxGroup)
		go e.lane(ctx, e.lanes[i])
	}
	p.endpoint = e
	return nil
}

// hand gives a committed group's messages to the lanes, each payment's to
// one lane in their order; it waits while a lane is full, so a group's
// webhooks are answered no faster than the endpoint takes its messages.
func (e *peerEndpoint) hand(ctx context.Context, msgs []outbox.Message) {
	for _, m := range msgs {
		h := fnv.New32a()
		h.Write([]byte(m.AggregateID))
		e.handed.Add(1)
		select {
		case e.lanes[h.Sum32()%uint32(len(e.lanes))] <- m:
		case <-ctx.Done():
			return
		}
	}
}

func (e *peerEndpoint) lane(ctx context.Context, in <-chan outbox.Message) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			r := e.sender.Send(ctx, paygatedelivery.Request{URL: e.url, MessageID: m.ID, Body: m.Body, Secrets: e.secrets, Now: time.Now()})
			if r.Succeeded() {
				e.last.Store(time.Now().UnixMicro())
				e.delivered.Add(1)
				continue
			}
			e.failed.Add(1)
			fmt.Fprintf(os.Stderr, "loadgen: peer: deliver %s: status %d, %v\n", m.ID, r.Status, r.Err)
		}
	}
}

// pending is how many handed messages have no outcome yet.
func (e *peerEndpoint) pending() int64 { return e.handed.Load() - e.delivered.Load() - e.failed.Load() }
