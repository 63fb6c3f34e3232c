package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// anchors are the machine's limits measured in the same run.
type anchors struct {
	pgbenchSingle []float64 // tps of the one-event transaction on paygate's and River's tables, each run
	pgbenchBare   []float64 // tps of the bare one-event transaction, each run
	// tps of the bare transaction's statements sent in one round trip, each
	// run: what a client that never waits between statements could reach
	pgbenchBareOneTrip []float64
	pgbenchBatch       float64 // tps of the batched transaction
	batchSize          int     // events per batched transaction
}

// single is the mean of the one-event pgbench runs: on a shared machine
// the load drifts, and the runs bracket the measurement.
func (a anchors) single() float64 { return meanOf(a.pgbenchSingle) }

// bare is the mean of the bare one-event pgbench runs: the least database
// work an event can cost, the anchor the applying targets are set against.
func (a anchors) bare() float64 { return meanOf(a.pgbenchBare) }

func meanOf(vs []float64) float64 {
	var sum float64
	for _, v := range vs {
		sum += v
	}
	if len(vs) == 0 {
		return 0
	}
	return sum / float64(len(vs))
}

// tpsList reads comma-separated tps figures, skipping what is not one.
func tpsList(s string) []float64 {
	var out []float64
	for _, v := range strings.Split(s, ",") {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 {
			out = append(out, f)
		}
	}
	return out
}

// shownTPS prints each run's tps, rounded.
func shownTPS(vs []float64) string {
	shown := make([]string, 0, len(vs))
	for _, v := range vs {
		shown = append(shown, strconv.FormatFloat(v, 'f', 0, 64))
	}
	return strings.Join(shown, ", ")
}

func (a anchors) batchEvents() float64 { return a.pgbenchBatch * float64(a.batchSize) }

func reportCommand(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	path := fs.String("results", "tmp/bench/results.json", "the measurements saved by loadgen run")
	single := fs.String("pgbench-single", "", "tps of the one-event-per-transaction pgbench runs, comma-separated (the ratios use their mean)")
	bare := fs.String("pgbench-bare", "", "tps of the bare one-event pgbench runs, comma-separated (the ratios use their mean)")
	oneTrip := fs.String("pgbench-bare-one-trip", "", "tps of the bare one-event pgbench runs in one round trip, comma-separated (compared, no target)")
	batch := fs.Float64("pgbench-batch", 0, "tps of the batched pgbench run")
	batchSize := fs.Int("batch-size", 32, "events per transaction of the batched pgbench run")
	title := fs.String("title", "", "lines printed above the table (\\n separates them)")
	_ = fs.Parse(args)
	b, err := os.ReadFile(*path)
	if err != nil {
		return err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("read %s: %w", *path, err)
	}
	a := anchors{pgbenchSingle: tpsList(*single), pgbenchBare: tpsList(*bare), pgbenchBareOneTrip: tpsList(*oneTrip), pgbenchBatch: *batch, batchSize: *batchSize}
	if *title != "" {
		fmt.Println(strings.ReplaceAll(*title, `\n`, "\n"))
	}
	bad := report(os.Stdout, r, a)
	if bad > 0 {
		return fmt.Errorf("%d requests were not answered 2xx or failed at the socket", bad)
	}
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}

// measured is verdict(ok) once the anchor the target is set against was
// measured (anchor > 0), and says so when it was not (BENCH_PEERS=0, no
// pgbench), rather than failing a target nothing was set against.
func measured(anchor float64, ok bool) string {
	if anchor <= 0 {
		return "not measured"
	}
	return verdict(ok)
}

// report prints the table and returns how many requests to the one
// instance (the levels and the paced run) were not answered 2xx or failed
// at the socket: then its figures are not those of a working gateway.
// Scale-out errors are printed, and do not count: several instances can
// meet the database's own limits (max_connections) first.
func report(out io.Writer, r results, a anchors) int64 {
	base, bare := a.single(), a.bare()
	ratioTo := func(v, of float64) string {
		if of <= 0 || v <= 0 {
			return "-"
		}
		return strconv.FormatFloat(v/of, 'f', 2, 64) + "×"
	}
	ratio := func(v float64) string { return ratioTo(v, base) }
	ratioBare := func(v float64) string { return ratioTo(v, bare) }
	var floor, main, broker *series
	var scale []*series
	peers := map[string]*series{}
	pairs := map[string][]*featurePair{}
	for i := range r.Series {
		s := &r.Series[i]
		switch {
		case s.Floor:
			floor = s
		case s.Pair > 0 && s.PairOf == pairLimitEndpoint:
			pairs[s.pairKind()] = addToPair(pairs[s.pairKind()], s)
		case s.Peer != "" && s.Grouped:
			peers[s.Peer+groupedKey] = s
		case s.Peer != "":
			peers[s.Peer] = s
		case s.NATS:
			broker = s
		case s.Pair > 0 || s.Delivery:
			pairs[s.pairKind()] = addToPair(pairs[s.pairKind()], s)
		case s.Proxied:
			scale = append(scale, s)
		case main == nil:
			main = s
		}
	}
	slices.SortFunc(scale, func(x, y *series) int { return x.Instances - y.Instances })

	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nanchors (same run)\tevents/s\t")
	if len(a.pgbenchSingle) > 0 {
		fmt.Fprintf(w, "pgbench, 1 event per transaction on paygate's and River's tables, 32 clients (tps %s; mean): pg1\t%.0f\t\n", shownTPS(a.pgbenchSingle), base)
	}
	if len(a.pgbenchBare) > 0 {
		fmt.Fprintf(w, "pgbench, bare: 1 event per transaction, an event row and a job row, 32 clients (tps %s; mean): bare\t%.0f\t\n", shownTPS(a.pgbenchBare), bare)
	}
	if len(a.pgbenchBareOneTrip) > 0 {
		fmt.Fprintf(w, "pgbench, bare in one round trip: the same transaction pipelined, 32 clients (tps %s; mean): 1rt\t%.0f\t\n", shownTPS(a.pgbenchBareOneTrip), meanOf(a.pgbenchBareOneTrip))
	}
	if a.pgbenchBatch > 0 {
		fmt.Fprintf(w, "pgbench, %d events per transaction, 32 clients (%.0f tps)\t%.0f\t\n", a.batchSize, a.pgbenchBatch, a.batchEvents())
	}
	var floorAt = map[int]float64{}
	if floor != nil {
		for _, lv := range floor.Levels {
			floorAt[lv.Connections] = lv.Wrk.RequestsPerS
			fmt.Fprintf(w, "floor server, wrk -c%d (req/s; p99 %.1f ms, non-2xx %d, socket errors %d)\t%.0f\t\n",
				lv.Connections, lv.Wrk.P99, lv.Wrk.Non2xx, lv.Wrk.socketErrors(), lv.Wrk.RequestsPerS)
		}
	}
	w.Flush()

	var bad int64 // of the one-instance series, which the targets are about
	levels := func(title string, s *series, ref *series) int64 {
		var failed int64
		fmt.Fprintf(out, "\n%s\n", title)
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := "conns\tevents\tingest/s\t×pg1\t×bare\tp50 ms\tp90 ms\tp99 ms\tmax ms\tnon-2xx\tsock err\te2e/s\t×pg1\t×bare\tingest txns\tev/txn\tapply txns\tev/txn\t"
		if ref != nil {
			head += "ingest vs 1\te2e vs 1\t"
		}
		fmt.Fprintln(w, head)
		var notes []string
		for _, lv := range s.Levels {
			failed += lv.Wrk.Non2xx + lv.Wrk.socketErrors()
			e2e := lv.e2e()
			line := fmt.Sprintf("%d\t%d\t%.0f\t%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%s\t%s\t%s\t%.0f\t%s\t%.0f\t%s\t",
				lv.Connections, lv.Events, lv.ingest(), ratio(lv.ingest()), ratioBare(lv.ingest()),
				lv.Wrk.P50, lv.Wrk.P90, lv.Wrk.P99, lv.Wrk.Max, lv.Wrk.Non2xx, lv.Wrk.socketErrors(),
				orDash(e2e, 0), ratio(e2e), ratioBare(e2e), lv.Ingest.Count, mean(lv.Ingest), lv.Apply.Count, mean(lv.Apply))
			if ref != nil {
				if rl := ref.level(lv.Connections); rl != nil {
					line += fmt.Sprintf("%s\t%s\t", times(lv.ingest(), rl.ingest()), times(e2e, rl.e2e()))
				} else {
					line += "-\t-\t"
				}
			}
			fmt.Fprintln(w, line)
			notes = append(notes, lv.notes()...)
		}
		w.Flush()
		for _, n := range notes {
			fmt.Fprintln(out, "  "+n)
		}
		for _, lv := range s.Levels {
			if b := lv.budgetLine(); b != "" {
				fmt.Fprintf(out, "-c%d %s\n", lv.Connections, b)
				for _, l := range lv.Budget.Database.lines(float64(lv.Stored)) {
					fmt.Fprintf(out, "-c%d %s\n", lv.Connections, l)
				}
			}
		}
		if len(s.PeakRSS) > 0 {
			var mib []string
			for _, v := range s.PeakRSS {
				mib = append(mib, strconv.FormatFloat(float64(v)/(1<<20), 'f', 0, 64))
			}
			fmt.Fprintf(out, "peak RSS (VmHWM) of each instance: %s MiB; poison events: %d\n", strings.Join(mib, ", "), s.Poison)
		}
		return failed
	}
	if main != nil {
		bad += levels(fmt.Sprintf("paygate, %d instance, wrk -t2 straight to it (ingest: 2xx answers/s; latencies are wrk's)", main.Instances), main, nil)
		if p := main.Paced; p != nil {
			bad += p.Wrk.Non2xx + p.Wrk.socketErrors()
			fmt.Fprintf(out, "paced: %d events/s offered over %d connections (wrk delay(), closed loop): achieved %.0f/s, p50 / p90 / p99 / max %.1f / %.1f / %.1f / %.1f ms, non-2xx %d, socket errors %d\n",
				p.Offered, p.Connections, p.Wrk.RequestsPerS, p.Wrk.P50, p.Wrk.P90, p.Wrk.P99, p.Wrk.Max, p.Wrk.Non2xx, p.Wrk.socketErrors())
			for _, n := range p.notes() {
				fmt.Fprintln(out, "  "+n)
			}
		}
	}
	peersSection(out, main, peers, levels, bare)
	var medians, limitMedians []pairMedians // the endpoint's, which its targets are about, and their limit's
	for _, k := range pairKinds {
		if ps := pairs[k.name]; len(ps) > 0 {
			failed, m := k.section(out, ps, a)
			switch k.name {
			case "endpoint":
				medians, bad = m, bad+failed
			case pairLimitEndpoint:
				limitMedians = m // a peer's failures are not paygate's
			default:
				bad += failed
			}
		}
	}
	if broker != nil {
		bad += levels("paygate, 1 instance, publishing to NATS JetStream (a local nats-server -js, file storage); vs 1: against the run without", broker, main)
		for _, lv := range broker.Levels {
			if lv.Published > 0 && lv.PublishSeconds > 0 {
				fmt.Fprintf(out, "-c%d: %d messages published %.1f s after the first send: %.0f messages published/s; %d not yet published when the last event was applied\n",
					lv.Connections, lv.Published, lv.PublishSeconds, float64(lv.Published)/lv.PublishSeconds, lv.PublishBacklog)
			}
		}
	}
	var one *series
	for _, s := range scale {
		if s.Instances == 1 {
			one = s
		}
	}
	var scaleBad int64
	for _, s := range scale {
		scaleBad += levels(fmt.Sprintf("scale-out: %d instance(s) on one database behind the proxy (vs 1: against 1 instance behind the same proxy)", s.Instances), s, one)
	}

	// Targets.
	fmt.Fprintln(out, "\ntargets")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if main != nil {
		if lv := main.level(64); lv != nil {
			// Against the gateway a team would write instead, run by the
			// same wrk with the same events, and the bare transaction.
			storeIngest, syncE2E := peers[peerStore].rateAt(64, (*level).ingest), peers[peerSync].rateAt(64, (*level).e2e)
			fmt.Fprintf(w, "64 connections: ingest ≥ 3× the store peer\t%s\t%s\t\n", ratioTo(lv.ingest(), storeIngest), measured(storeIngest, lv.ingest() >= 3*storeIngest))
			fmt.Fprintf(w, "64 connections: ingest ≥ 1.5× bare\t%s\t%s\t\n", ratioBare(lv.ingest()), measured(bare, lv.ingest() >= 1.5*bare))
			fmt.Fprintf(w, "64 connections: end-to-end ≥ 1.5× the sync peer\t%s\t%s\t\n", ratioTo(lv.e2e(), syncE2E), measured(syncE2E, lv.e2e() >= 1.5*syncE2E))
			if base > 0 || bare > 0 {
				fmt.Fprintf(w, "64 connections: end-to-end against pgbench single, bare (compared, no target)\t%s, %s\t\t\n", ratio(lv.e2e()), ratioBare(lv.e2e()))
			}
			if oneTrip := meanOf(a.pgbenchBareOneTrip); oneTrip > 0 {
				fmt.Fprintf(w, "64 connections: ingest, end-to-end against bare in one round trip (compared, no target)\t%s, %s\t\t\n", ratioTo(lv.ingest(), oneTrip), ratioTo(lv.e2e(), oneTrip))
			}
		}
		if lv := main.level(256); lv != nil {
			limit, what := a.batchEvents(), fmt.Sprintf("pgbench-%d", a.batchSize)
			if f, ok := floorAt[256]; ok && (limit <= 0 || f < limit) {
				limit, what = f, "floor"
			}
			if limit > 0 {
				fmt.Fprintf(w, "256 connections: ingest ≥ 25 %% of the lower limit (%s, %.0f/s)\t%.1f %%\t%s\t\n", what, limit, 100*lv.ingest()/limit, verdict(lv.ingest() >= 0.25*limit))
			}
		}
		if p := main.Paced; p != nil {
			fmt.Fprintf(w, "p99 ≤ 50 ms at %d events/s offered (achieved %.0f/s)\t%.1f ms\t%s\t\n", p.Offered, p.Wrk.RequestsPerS, p.Wrk.P99, verdict(p.Wrk.P99 <= 50))
		}
		if len(main.PeakRSS) > 0 {
			rss := slices.Max(main.PeakRSS)
			fmt.Fprintf(w, "peak RSS ≤ 200 MiB (VmHWM)\t%.0f MiB\t%s\t\n", float64(rss)/(1<<20), verdict(rss <= 200<<20))
		}
	}
	for _, m := range medians {
		c := m.conns
		fmt.Fprintf(w, "%d connections, one endpoint: ingest within 10 %% of without (median of %d pairs)\t%s\t%s\t\n", c, m.n, times(m.ingest, 1), verdict(m.ingest >= 0.9))
		fmt.Fprintf(w, "%d connections, one endpoint: end-to-end within 10 %% of without (median of %d pairs)\t%s\t%s\t\n", c, m.n, times(m.e2e, 1), verdict(m.e2e >= 0.9))
		if bare > 0 {
			// Issue 31's target, which the peers replaced as end to end's
			// anchor: kept as a comparison.
			fmt.Fprintf(w, "%d connections, one endpoint: end-to-end against bare (median of %d pairs; compared, no target)\t%s\t\t\n", c, m.n, ratioBare(m.withE2E))
		}
		if m.measuredLag {
			fmt.Fprintf(w, "%d connections, one endpoint: delivery keeps up in every pair (last delivered ≤ 1 s after the last applied; the latest)\t%+.1f s\t%s\t\n", c, m.worstLag, verdict(m.worstLag <= 1))
		}
		for _, l := range limitMedians {
			if l.conns == c {
				fmt.Fprintf(w, "%d connections, one endpoint: the least work with paygate's rows, end-to-end of its run without (median of %d pairs; the limit for the target above, compared)\t%s\t\t\n", c, l.n, times(l.e2e, 1))
			}
		}
	}
	if broker != nil && main != nil {
		for _, lv := range broker.Levels {
			ref := main.level(lv.Connections)
			if ref == nil {
				continue
			}
			c := lv.Connections
			fmt.Fprintf(w, "%d connections, NATS on: ingest within 10 %% of without\t%s\t%s\t\n", c, times(lv.ingest(), ref.ingest()), verdict(lv.ingest() >= 0.9*ref.ingest()))
			fmt.Fprintf(w, "%d connections, NATS on: end-to-end within 10 %% of without\t%s\t%s\t\n", c, times(lv.e2e(), ref.e2e()), verdict(lv.e2e() >= 0.9*ref.e2e()))
			if lv.Published > 0 && lv.E2ESeconds > 0 {
				// As for delivery: the last message acknowledged by
				// JetStream within a second of the last event's applying.
				fmt.Fprintf(w, "%d connections, NATS on: publishing keeps up (last published ≤ 1 s after the last applied)\t%+.1f s\t%s\t\n", c, lv.PublishSeconds-lv.E2ESeconds, verdict(lv.PublishSeconds-lv.E2ESeconds <= 1))
			}
		}
	}
	fmt.Fprintf(w, "zero non-2xx (and zero socket errors), one instance\t%d\t%s\t\n", bad, verdict(bad == 0))
	if len(scale) > 0 {
		fmt.Fprintf(w, "(scale-out runs: non-2xx and socket errors)\t%d\t\t\n", scaleBad)
	}
	w.Flush()
	return bad
}

// ingest is distinct events acknowledged per second: wrk's answers that
// were 2xx, over wrk's duration (each request is a distinct event).
func (lv level) ingest() float64 {
	if lv.Wrk.Seconds <= 0 {
		return lv.Wrk.RequestsPerS
	}
	return float64(lv.Wrk.Requests-lv.Wrk.Non2xx) / lv.Wrk.Seconds
}

// e2e is distinct events per second from the first send until none was
// left `received`: the events found in the inbox (all that were sent,
// unless some were refused), or those sent; 0 when not measured.
func (lv level) e2e() float64 {
	if lv.E2ESeconds <= 0 {
		return 0
	}
	n := lv.Events
	if lv.Stored > 0 {
		n = lv.Stored
	}
	return float64(n) / lv.E2ESeconds
}

// notes are what a level's figures do not show: events left unsent when
// wrk's -d bound ended the run, events answered 2xx but missing from the
// inbox, the first non-2xx answer.
func (lv level) notes() []string {
	var out []string
	name := fmt.Sprintf("-c%d", lv.Connections)
	if lv.Offered > 0 {
		name = fmt.Sprintf("paced -c%d", lv.Connections)
	}
	if lv.Wrk.Loaded > 0 && lv.Wrk.Answered < lv.Wrk.Loaded {
		out = append(out, fmt.Sprintf("%s: wrk's -d bound ended the run after %.0f s: %d of %d events answered", name, lv.Wrk.Seconds, lv.Wrk.Answered, lv.Wrk.Loaded))
	}
	if lv.Stored > 0 && int64(lv.Stored) < lv.Wrk.Answered-lv.Wrk.Non2xx {
		out = append(out, fmt.Sprintf("%s: %d events answered 2xx, only %d in the inbox", name, lv.Wrk.Answered-lv.Wrk.Non2xx, lv.Stored))
	}
	if lv.Wrk.Non2xx > 0 {
		out = append(out, fmt.Sprintf("%s: %d non-2xx, the first: %s", name, lv.Wrk.Non2xx, lv.Wrk.FirstBad))
	}
	if n := lv.Wrk.socketErrors(); n > 0 {
		out = append(out, fmt.Sprintf("%s: socket errors: connect %d, read %d, write %d, timeout %d", name, lv.Wrk.Connect, lv.Wrk.Read, lv.Wrk.Write, lv.Wrk.Timeout))
	}
	return out
}

// peersSection prints the peers' tables (levels prints them) and paygate
// set against them at each connection count: its ingest against the store
// peer's, its end to end against the sync peer's. The peers' failed
// requests are printed in their tables and not counted with paygate's.
func peersSection(out io.Writer, main *series, peers map[string]*series, levels func(string, *series, *series) int64, bare float64) {
	store, syncPeer := peers[peerStore], peers[peerSync]
	if store == nil && syncPeer == nil {
		return
	}
	if store != nil {
		levels("peer, store: the gateway a team would write instead, keeping the event and a job row in one transaction per webhook (end to end: its ingest, nothing applied)", store, nil)
	}
	if syncPeer != nil {
		levels("peer, sync: the gateway a team would write instead, applying the event (payment, capture's ledger transaction) in the webhook's transaction (end to end: its ingest)", syncPeer, nil)
	}
	if main == nil {
		return
	}
	fmt.Fprintln(out, "\npaygate against the peers (same run, same wrk and events)")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "conns\tpaygate ingest/s\tstore peer ingest/s\tpaygate vs store\tpaygate e2e/s\tsync peer e2e/s\tpaygate vs sync\t")
	for _, lv := range main.Levels {
		storeIngest, syncE2E := store.rateAt(lv.Connections, (*level).ingest), syncPeer.rateAt(lv.Connections, (*level).e2e)
		fmt.Fprintf(w, "%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", lv.Connections, lv.ingest(), orDash(storeIngest, 0), times(lv.ingest(), storeIngest),
			orDash(lv.e2e(), 0), orDash(syncE2E, 0), times(lv.e2e(), syncE2E))
	}
	w.Flush()
	leastWork(out, peers, levels)
	inboxWork(out, main, peers, levels, bare)
	contractWork(out, main, peers, levels)
}

// groupedKey marks a grouped peer among the peers.
const groupedKey = "/grouped"

// leastWork prints the grouped peers' tables and, at each connection
// count, how far the least work gets beyond the peers: the most any
// gateway's ingest can be of the store peer's, and its end to end of the
// sync peer's, on this machine.
func leastWork(out io.Writer, peers map[string]*series, levels func(string, *series, *series) int64) {
	store, syncPeer := peers[peerStore], peers[peerSync]
	gStore, gSync := peers[peerStore+groupedKey], peers[peerSync+groupedKey]
	if gStore == nil && gSync == nil {
		return
	}
	if gStore != nil {
		levels("the least work, store: the webhooks waiting together kept, with their jobs, by one transaction (loadgen peer -group)", gStore, nil)
	}
	if gSync != nil {
		levels("the least work, sync: the webhooks waiting together kept and applied by one transaction (loadgen peer -group)", gSync, nil)
	}
	fmt.Fprintln(out, "\nthe least work against the peers: the most a gateway reaches of them here")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "conns\tstore peer\tleast work, store\tleast vs store\tsync peer\tleast work, sync\tleast vs sync\t")
	seen := map[int]bool{}
	for _, s := range []*series{gStore, gSync} {
		if s == nil {
			continue
		}
		for _, lv := range s.Levels {
			c := lv.Connections
			if seen[c] {
				continue
			}
			seen[c] = true
			si, gi := store.rateAt(c, (*level).ingest), gStore.rateAt(c, (*level).ingest)
			se, ge := syncPeer.rateAt(c, (*level).e2e), gSync.rateAt(c, (*level).e2e)
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c, orDash(si, 0), orDash(gi, 0), times(gi, si),
				orDash(se, 0), orDash(ge, 0), times(ge, se))
		}
	}
	w.Flush()
}

// inboxWork prints the inbox peer's table and, at each connection count,
// its ingest against the store peer's and the bare transaction's, and
// paygate's against its: how far the least work writing paygate's ingest
// rows gets here, and how much of that paygate's ingest reaches.
func inboxWork(out io.Writer, main *series, peers map[string]*series, levels func(string, *series, *series) int64, bare float64) {
	in := peers[peerInbox+groupedKey]
	if in == nil {
		return
	}
	levels("the least work, paygate's ingest rows: the webhooks waiting together kept by paygate's own ingest statements, the inbox rows and one apply_events job, in paygate's tables (loadgen peer -mode inbox -group)", in, nil)
	fmt.Fprintln(out, "\nthe least work with paygate's ingest rows: the most paygate's ingest reaches here")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "conns\tstore peer/s\tleast work, paygate's ingest rows\tleast vs store\tleast vs bare\tpaygate ingest/s\tpaygate of least\t")
	for _, lv := range in.Levels {
		c := lv.Connections
		si, pi := peers[peerStore].rateAt(c, (*level).ingest), main.rateAt(c, (*level).ingest)
		fmt.Fprintf(w, "%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t\n", c, orDash(si, 0), lv.ingest(), times(lv.ingest(), si), times(lv.ingest(), bare),
			orDash(pi, 0), times(pi, lv.ingest()))
	}
	w.Flush()
}

// contractWork prints the contract peer's table and, at each connection
// count, its end to end against the sync peer's and paygate's against
// its: how far the least work writing paygate's rows gets beyond the
// obvious gateway here, and how much of that paygate reaches.
func contractWork(out io.Writer, main *series, peers map[string]*series, levels func(string, *series, *series) int64) {
	contract := peers[peerContract+groupedKey]
	if contract == nil {
		return
	}
	levels("the least work, paygate's rows: the webhooks waiting together kept and applied by one transaction with every row paygate writes for them, in paygate's tables (loadgen peer -mode contract -group)", contract, nil)
	fmt.Fprintln(out, "\nthe least work with paygate's rows: the most paygate's end to end reaches here")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "conns\tsync peer e2e/s\tleast work, paygate's rows\tleast vs sync\tpaygate e2e/s\tpaygate of least\t")
	for _, lv := range contract.Levels {
		c := lv.Connections
		se, pe := peers[peerSync].rateAt(c, (*level).e2e), main.rateAt(c, (*level).e2e)
		fmt.Fprintf(w, "%d\t%s\t%.0f\t%s\t%s\t%s\t\n", c, orDash(se, 0), lv.e2e(), times(lv.e2e(), se), orDash(pe, 0), times(pe, lv.e2e()))
	}
	w.Flush()
}

// rateAt is of(the level at conns) of s; 0 when s is nil or has no such
// level (the report prints a dash).
func (s *series) rateAt(conns int, of func(*level) float64) float64 {
	if s == nil {
		return 0
	}
	if lv := s.level(conns); lv != nil {
		return of(lv)
	}
	return 0
}

func (s *series) level(conns int) *level {
	for i := range s.Levels {
		if s.Levels[i].Connections == conns {
			return &s.Levels[i]
		}
	}
	return nil
}

func mean(b batchStats) string {
	if b.Count <= 0 {
		return "-"
	}
	return strconv.FormatFloat(b.Events/b.Count, 'f', 1, 64)
}

func times(v, of float64) string {
	if v <= 0 || of <= 0 {
		return "-"
	}
	return strconv.FormatFloat(v/of, 'f', 2, 64) + "×"
}

func orDash(v float64, prec int) string {
	if v <= 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// featurePair is a pair of runs made one after the other, one with a
// feature on (an endpoint attached, the sweep, tracing) and one without:
// on a shared machine the load moves a single run's rate by more than a
// feature's cost, so the report sets each run with it against its own
// partner, and takes the median over the pairs.
type featurePair struct {
	n             int
	with, without *series
	withFirst     bool // the run with the feature was made first
}

// pairKind is the feature s's pair compares.
func (s *series) pairKind() string {
	if s.PairOf == "" {
		return "endpoint"
	}
	return s.PairOf
}

// addToPair files s, one of a pair's runs, with its partner; pairs stay
// in the order of their first run.
func addToPair(pairs []*featurePair, s *series) []*featurePair {
	var p *featurePair
	for _, q := range pairs {
		if q.n == s.Pair {
			p = q
		}
	}
	if p == nil {
		p = &featurePair{n: s.Pair, withFirst: s.With || s.Delivery}
		pairs = append(pairs, p)
	}
	if s.With || s.Delivery {
		p.with = s
	} else {
		p.without = s
	}
	return pairs
}

// pairKind is one feature pairs compare: what its section says "with"
// means, and its own columns; the rates, their ratios and medians, the
// errors and the budgets are every kind's.
type pairKind struct {
	name  string // series.PairOf
	title string // %d: how many pairs
	head  string // the feature's columns, each ending in a tab
	cells func(x pairLevel, a anchors) string
	// idle says of a pair whose run with the feature shows it at no work
	// that the pair measures nothing; "" otherwise.
	idle func(x pairLevel) string
	// oneInstance: both runs of every pair are made on one instance; else
	// each run has an instance of its own.
	oneInstance bool
}

// pairKinds are the kinds of pairs, in the report's order.
var pairKinds = []pairKind{
	{
		name:        "endpoint",
		title:       "one endpoint attached (a local receiver answering 200 at once) against none: %d pairs of runs made one after the other on one instance, each pair's first alternating",
		head:        "with ×bare\tmessages/s\tlast delivered after last applied\t",
		oneInstance: true,
		cells: func(x pairLevel, a anchors) string {
			msgs := "-"
			if x.with.Messages > 0 && x.with.DeliverySeconds > 0 {
				msgs = strconv.FormatFloat(float64(x.with.Messages)/x.with.DeliverySeconds, 'f', 0, 64)
			}
			return fmt.Sprintf("%s\t%s\t%+.1f s\t", times(x.with.e2e(), a.bare()), msgs, x.lag())
		},
		idle: func(pairLevel) string { return "" },
	},
	{
		name: pairLimitEndpoint,
		title: "the least work with paygate's rows, one endpoint attached (loadgen peer -mode contract -group -endpoint: each message POSTed once, signed, " +
			"by paygate's own sender, nothing recorded, to the same receiver) against none: %d pairs of runs made one after the other, each on a peer of its own, each pair's first alternating; " +
			"the limit for paygate's ratio above",
		head: "messages/s\tlast delivered after last answered\t",
		cells: func(x pairLevel, _ anchors) string {
			return fmt.Sprintf("%s\t%+.1f s\t", perSecond(float64(x.with.Messages), x.with.DeliverySeconds), x.lag())
		},
		idle: func(x pairLevel) string {
			if x.with.Messages > 0 {
				return ""
			}
			return "the peer delivered no message while the run was measured"
		},
	},
	{
		name: "sweep",
		title: "Stripe's missed-event sweep on (a paygate started with PAYGATE_STRIPE_SWEEP_EVERY, listing from `loadgen run -stripe-api` the events the run sends, each 5 s after it is created) " +
			"against off: %d pairs of runs made one after the other, each on an instance of its own, each pair's first alternating; " +
			"listed: events the sweeps listed from the first send until the last event was applied, new: of them, those the inbox lacked; own: of the run's events, those listed by then",
		head: "listed\tnew\town\tlist pages/s\t",
		cells: func(x pairLevel, _ anchors) string {
			w := x.with
			return fmt.Sprintf("%d\t%d\t%d of %d\t%s\t", w.SweepListed, w.SweepNew, w.SweepOwn, w.Events, perSecond(float64(w.SweepPages), w.E2ESeconds))
		},
		idle: func(x pairLevel) string {
			if x.with.SweepListed > 0 {
				return ""
			}
			return "the sweep listed nothing while the run was measured"
		},
	},
	{
		name: "tracing",
		title: "tracing on (OpenTelemetry spans exported over OTLP/HTTP to `loadgen receive`) against off: " +
			"%d pairs of runs made one after the other, each on an instance of its own, each pair's first alternating; " +
			"spans: received from the first send until the level's end",
		head: "spans\tspans/event\t",
		cells: func(x pairLevel, _ anchors) string {
			return fmt.Sprintf("%d\t%s\t", x.with.Spans, orDash(float64(x.with.Spans)/float64(x.with.Events), 1))
		},
		idle: func(x pairLevel) string {
			if x.with.Spans > 0 {
				return ""
			}
			return "the receiver took no span while the run was measured"
		},
	},
}

func perSecond(n, seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return strconv.FormatFloat(n/seconds, 'f', 1, 64)
}

// section prints k's pairs: each pair's rates with and without and their
// ratios, the feature's own columns, the medians over the pairs at each
// connection count (returned; a pair whose run with the feature shows it
// idle left out), the budgets and the peak RSS. It returns
// too the requests not answered 2xx or failed at the socket in either run.
func (k pairKind) section(out io.Writer, pairs []*featurePair, a anchors) (int64, []pairMedians) {
	var (
		bad      int64
		pl       []pairLevel
		measured []pairLevel // the medians', with the feature at work
		notes    []string
	)
	fmt.Fprintf(out, "\n"+k.title+"\n", len(pairs))
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "pair\tconns\tfirst\tingest/s without\twith\tvs\te2e/s without\twith\tvs\t"+k.head+"non-2xx\tsock err\t")
	for _, p := range pairs {
		for _, x := range p.levels() {
			pl = append(pl, x)
			first := "without"
			if p.withFirst {
				first = "with"
			}
			failed := x.with.Wrk.Non2xx + x.without.Wrk.Non2xx
			sock := x.with.Wrk.socketErrors() + x.without.Wrk.socketErrors()
			bad += failed + sock
			fmt.Fprintf(w, "%d\t%d\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s%d\t%d\t\n",
				p.n, x.with.Connections, first, x.without.ingest(), x.with.ingest(), times(x.with.ingest(), x.without.ingest()),
				orDash(x.without.e2e(), 0), orDash(x.with.e2e(), 0), times(x.with.e2e(), x.without.e2e()),
				k.cells(x, a), failed, sock)
			for _, n := range x.without.notes() {
				notes = append(notes, fmt.Sprintf("pair %d without: %s", p.n, n))
			}
			for _, n := range x.with.notes() {
				notes = append(notes, fmt.Sprintf("pair %d with: %s", p.n, n))
			}
			if idle := k.idle(x); idle != "" {
				notes = append(notes, fmt.Sprintf("pair %d with: -c%d: %s: the pair measures nothing, and is left out of the median", p.n, x.with.Connections, idle))
			} else {
				measured = append(measured, x)
			}
		}
	}
	w.Flush()
	for _, n := range notes {
		fmt.Fprintln(out, "  "+n)
	}
	medians := pairMediansOf(measured)
	for _, m := range medians {
		fmt.Fprintf(out, "-c%d, median of %d pairs: ingest %s, end to end %s of the run without\n", m.conns, m.n, times(m.ingest, 1), times(m.e2e, 1))
	}
	for _, x := range pl {
		if b := x.without.budgetLine(); b != "" {
			fmt.Fprintf(out, "pair %d without, -c%d %s\n", x.pair, x.without.Connections, b)
		}
		if b := x.with.budgetLine(); b != "" {
			fmt.Fprintf(out, "pair %d with, -c%d %s\n", x.pair, x.with.Connections, b)
		}
	}
	with, without := pairsPeakRSS(pairs)
	switch {
	case k.oneInstance && max(with, without) > 0:
		fmt.Fprintf(out, "peak RSS (VmHWM) of the instance: %.0f MiB\n", float64(max(with, without))/(1<<20))
	case !k.oneInstance && with > 0 && without > 0:
		fmt.Fprintf(out, "peak RSS (VmHWM), the highest of the instances: with %.0f MiB, without %.0f MiB\n", float64(with)/(1<<20), float64(without)/(1<<20))
	}
	return bad, medians
}

// pairLevel is one connection count measured by both runs of a pair.
type pairLevel struct {
	pair          int
	with, without *level
}

// levels are the connection counts both of p's runs measured.
func (p *featurePair) levels() []pairLevel {
	if p.with == nil || p.without == nil {
		return nil
	}
	var out []pairLevel
	for i := range p.with.Levels {
		if without := p.without.level(p.with.Levels[i].Connections); without != nil {
			out = append(out, pairLevel{pair: p.n, with: &p.with.Levels[i], without: without})
		}
	}
	return out
}

// lag is how long after the last event was applied the last message was
// delivered (negative: before it).
func (x pairLevel) lag() float64 { return x.with.DeliverySeconds - x.with.E2ESeconds }

// pairMedians are the pairs' figures at one connection count.
type pairMedians struct {
	conns       int
	n           int
	ingest, e2e float64 // the median ratio, with to without
	withE2E     float64 // the median end-to-end rate with the endpoint
	worstLag    float64 // the latest last delivery after the last applied event
	measuredLag bool
}

// pairMediansOf are pl's medians, a connection count each, in the order
// of their first pair.
func pairMediansOf(pl []pairLevel) []pairMedians {
	var out []pairMedians
	for _, x := range pl {
		if !slices.ContainsFunc(out, func(m pairMedians) bool { return m.conns == x.with.Connections }) {
			out = append(out, medianPair(pl, x.with.Connections))
		}
	}
	return out
}

func medianPair(pl []pairLevel, conns int) pairMedians {
	m := pairMedians{conns: conns}
	var ingest, e2e, withE2E []float64
	for _, x := range pl {
		if x.with.Connections != conns {
			continue
		}
		m.n++
		if x.with.ingest() > 0 && x.without.ingest() > 0 {
			ingest = append(ingest, x.with.ingest()/x.without.ingest())
		}
		if x.with.e2e() > 0 && x.without.e2e() > 0 {
			e2e = append(e2e, x.with.e2e()/x.without.e2e())
			withE2E = append(withE2E, x.with.e2e())
		}
		if x.with.Messages > 0 && x.with.E2ESeconds > 0 {
			if !m.measuredLag || x.lag() > m.worstLag {
				m.worstLag = x.lag()
			}
			m.measuredLag = true
		}
	}
	m.ingest, m.e2e, m.withE2E = median(ingest), median(e2e), median(withE2E)
	return m
}

// median is the middle value, or the mean of the two middle ones; 0 for
// none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	vs = slices.Sorted(slices.Values(vs))
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

// pairsPeakRSS is the highest peak RSS the pairs' runs with the feature
// saw, and the highest of those without.
func pairsPeakRSS(pairs []*featurePair) (with, without int64) {
	top := func(s *series, v int64) int64 {
		if s == nil || len(s.PeakRSS) == 0 {
			return v
		}
		return max(v, slices.Max(s.PeakRSS))
	}
	for _, p := range pairs {
		with, without = top(p.with, with), top(p.without, without)
	}
	return with, without
}

// budgetLine is what lv's database work was per event applied, or ""
// when it was not measured.
func (lv *level) budgetLine() string {
	b, n := lv.Budget, float64(lv.Stored)
	if b == nil || n <= 0 {
		return ""
	}
	line := fmt.Sprintf("per event applied: %.1f statements in %.1f round trips, %.1f rows written, %.0f bytes of WAL (the server's)",
		b.Statements/n, b.RoundTrips/n, b.Rows/n, b.WALBytes/n)
	if c := b.CPU; c.Paygate > 0 || c.Postgres > 0 {
		line += fmt.Sprintf("; CPU %.0f µs in paygate, %.0f µs in PostgreSQL (the server's)", c.Paygate*1e6/n, c.Postgres*1e6/n)
		if c.Receiver > 0 {
			line += fmt.Sprintf(", %.0f µs in the receiver", c.Receiver*1e6/n)
		}
	}
	if m := b.Machine; m != nil {
		line += fmt.Sprintf("; the machine's CPUs %.0f %% busy while acknowledging (%.1f s), %.0f %% after it until the last was applied (%.1f s)",
			100*m.IngestBusy, m.IngestSeconds, 100*m.TailBusy, m.TailSeconds)
		line += m.cpuSplit(n)
	}
	return line
}

// cpuSplit is paygate's and PostgreSQL's CPU in each phase of a level that
// applied n events: while acknowledging, per event acknowledged (applying's
// share of that phase included, with how much was applied); after it, per
// event applied then. "" when the phases' CPU was not read.
func (m *machinePhases) cpuSplit(n float64) string {
	in, tail := m.IngestCPU, m.TailCPU
	if in.Paygate+in.Postgres <= 0 || tail.Paygate+tail.Postgres <= 0 {
		return ""
	}
	line := fmt.Sprintf("; while acknowledging, %.0f µs in paygate and %.0f µs in PostgreSQL an event acknowledged (%.0f applied meanwhile)",
		in.Paygate*1e6/n, in.Postgres*1e6/n, m.AppliedAcknowledging)
	if rest := n - m.AppliedAcknowledging; rest > 0 {
		line += fmt.Sprintf(", after it %.0f µs and %.0f µs an event applied", tail.Paygate*1e6/rest, tail.Postgres*1e6/rest)
	}
	return line
}
