// Command loadgen is the tooling of `make bench` (scripts/bench.sh): it
// builds the requests wrk sends, runs wrk, reads what paygate did with them,
// and prints the table. It is a benchmark tool, never part of paygate.
//
// The sender is wrk (Debian's package), not a client of ours: a client
// written next to the server ends up tuned to it, a provider's is not.
// loadgen only prepares wrk's input and reads its output.
//
//	loadgen run     for each connection count: builds distinct Stripe events
//	                with the simulator (internal/stripesim), signs them as
//	                Stripe does just before the run (the tolerance is 300 s),
//	                writes one file per wrk thread, runs wrk with
//	                scripts/bench.lua until every event is answered, waits
//	                until no inbox row is left `received`, and saves the
//	                measurements; then the same at a paced rate for latency.
//	                With -stripe-api it also serves Stripe's events list of
//	                the events it sends, for paygate's missed-event sweep.
//	loadgen floor   the floor server: Echo, reads the body, verifies the
//	                Stripe signature and decodes the envelope with
//	                provider/stripe, answers paygate's 200 body; no database.
//	loadgen peer    the gateway a team would write instead, measured beside
//	                paygate: net/http, stripe-go's signature check, a pool
//	                of 32, one transaction per webhook; -mode store keeps
//	                the event and a job, -mode sync applies it too. With
//	                -group, the least work: the webhooks waiting together
//	                in one transaction; -mode contract -group writes every
//	                row paygate writes for an event, in paygate's tables
//	                (with -endpoint, and delivers each message once), and
//	                -mode inbox -group the rows paygate's ingest writes.
//	loadgen proxy   a round-robin reverse proxy in front of several
//	                `paygate serve` instances, keep-alive to each.
//	loadgen receive the endpoint paygate delivers to, answering 200 at
//	                once, and the OTLP/HTTP receiver its traces export to.
//	loadgen report  prints the table of saved measurements, with the
//	                anchors and the targets.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "run":
		err = runCommand(args)
	case "floor":
		err = floorCommand(args)
	case "peer":
		err = peerCommand(args)
	case "proxy":
		err = proxyCommand(args)
	case "report":
		err = reportCommand(args)
	case "receive":
		err = receiveCommand(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: loadgen run|floor|peer|proxy|receive|report [flags] (-h for each)")
	os.Exit(2)
}
