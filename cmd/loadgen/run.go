package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/internal/proccpu"
	"github.com/paygate/paygate/internal/stripesim"
)

// floorRequests are the distinct requests the floor server is sent, round
// and round.
const floorRequests = 20000

type runOptions struct {
	url          string
	metrics      string
	secret       string
	databaseURL  string
	levels       string
	seconds      float64
	expect       string
	threads      int
	wrk, script  string
	out          string
	label        string
	instances    int
	proxied      bool
	floor        bool
	peer         string
	grouped      bool
	warmup       int
	refundShare  float64
	rate         int
	rateSeconds  float64
	rateConns    int
	settle       time.Duration
	pids         string
	save         string
	profileOut   string
	profileToken string
	delivery     bool
	nats         bool
	budget       bool
	receiverPID  int
	pair         int
	pairOf       string
	with         bool
	stripeAPI    string
	stripeAPIKey string
	traces       string
	hold         time.Duration
}

func runCommand(args []string) error {
	var o runOptions
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.StringVar(&o.url, "url", "http://127.0.0.1:8080/webhooks/stripe", "the Stripe webhook endpoint wrk sends to (paygate, the proxy or the floor server)")
	fs.BoolVar(&o.budget, "budget", false, "measure each level's work per applied event: statements and round trips (paygate's /metrics), rows written and WAL bytes (PostgreSQL's statistics), the CPU of paygate (-pids), of PostgreSQL's processes and of the receiver (-receiver-pid); adds about 11 s a level")
	fs.IntVar(&o.receiverPID, "receiver-pid", 0, "the process id of the endpoint's receiver, for its CPU in -budget")
	fs.StringVar(&o.metrics, "metrics", "", "comma-separated base URLs of the paygate instances, for /metrics and /debug/pprof/ (default: -url's)")
	fs.StringVar(&o.secret, "secret", stripesim.DefaultWebhookSecret, "webhook signing secret (one of PAYGATE_STRIPE_WEBHOOK_SECRETS)")
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "paygate's database, to wait for every event to be applied (empty: ingest only)")
	fs.StringVar(&o.levels, "levels", "16,64,256", "wrk connection counts, comma-separated")
	fs.Float64Var(&o.seconds, "seconds", 10, "about how long each level runs: events = seconds × the rate -expect gives")
	fs.StringVar(&o.expect, "expect", "16=2100,64=4000,256=6200", "expected ingest events/s by connection count (others: interpolated), to size each level")
	fs.IntVar(&o.threads, "threads", 2, "wrk threads (-t)")
	fs.StringVar(&o.wrk, "wrk", "wrk", "wrk binary")
	fs.StringVar(&o.script, "script", "scripts/bench.lua", "wrk script")
	fs.StringVar(&o.out, "out", "tmp/bench", "directory of the request files and of wrk's outputs")
	fs.StringVar(&o.label, "label", "paygate", "name of this series in the saved measurements")
	fs.IntVar(&o.instances, "instances", 1, "paygate instances behind -url (for the report)")
	fs.BoolVar(&o.proxied, "proxied", false, "-url is the proxy (for the report)")
	fs.BoolVar(&o.floor, "floor", false, "-url is the floor server: requests are sent round and round for -seconds, nothing is stored")
	fs.StringVar(&o.peer, "peer", "", "-url is a peer (loadgen peer) of this mode, store, sync, contract or inbox: it answers once the event is stored (and with sync or contract, applied), so end to end is its ingest; its /count checks the events are stored; -database-url is only for the ANALYZE after the warm-up")
	fs.BoolVar(&o.grouped, "grouped", false, "the -peer is grouped (loadgen peer -group): the least work, reported beside the peers")
	fs.IntVar(&o.warmup, "warmup", 5000, "events ingested and applied, then ANALYZE, before measuring (needs -database-url)")
	fs.Float64Var(&o.refundShare, "refunds", 0.1, "share of payments refunded (4 more events each)")
	fs.IntVar(&o.rate, "rate", 1000, "events/s offered in the latency run (0 skips it)")
	fs.Float64Var(&o.rateSeconds, "rate-seconds", 10, "length of the latency run")
	fs.IntVar(&o.rateConns, "rate-connections", 64, "wrk connections of the latency run")
	fs.DurationVar(&o.settle, "settle-timeout", 3*time.Minute, "longest wait for every event to be applied")
	fs.StringVar(&o.pids, "pids", "", "comma-separated process ids of the paygate instances, for their peak RSS")
	fs.StringVar(&o.save, "save", "tmp/bench/results.json", "the measurements file this series is added to (replacing one of the same label)")
	fs.StringVar(&o.profileOut, "cpuprofile", "", "save a CPU profile of the first instance during the highest level here (needs -ops-token)")
	fs.StringVar(&o.profileToken, "ops-token", "", "an ops bearer token, for /debug/pprof/")
	fs.BoolVar(&o.delivery, "delivery", false, "an endpoint is attached: after each level, wait until its messages are delivered (needs -database-url)")
	fs.IntVar(&o.pair, "pair", 0, "this run is one of pair N of runs with and without a feature (-pair-of), made one after the other (for the report)")
	fs.StringVar(&o.pairOf, "pair-of", "endpoint", "what -pair compares: endpoint (-delivery marks the run with one attached), sweep or tracing (-with marks the run with it on), or limit-endpoint (a -peer contract, -with: started with -endpoint)")
	fs.BoolVar(&o.with, "with", false, "this run of a sweep or tracing pair has the feature on: with sweep, it waits after the warm-up until a sweep has listed events (needs -stripe-api); with tracing, it counts the spans exported (needs -traces)")
	fs.StringVar(&o.stripeAPI, "stripe-api", "", "serve Stripe's events list (GET /v1/events) of the events this run sends on this address, for a paygate started with PAYGATE_STRIPE_API_URL=http://<address>; events are then created at the pace they are expected to be sent, and listed 5 s after")
	fs.StringVar(&o.stripeAPIKey, "stripe-api-key", stripesim.DefaultAPIKey, "the key -stripe-api accepts (paygate's PAYGATE_STRIPE_API_KEY)")
	fs.StringVar(&o.traces, "traces", "", "base URL of the OTLP receiver (loadgen receive) paygate exports its spans to: each level counts the spans it received")
	fs.DurationVar(&o.hold, "hold", 0, "after the warm-up, wait this long before measuring (both runs of a pair, when one waits for its feature to start)")
	fs.BoolVar(&o.nats, "nats", false, "publishing to NATS JetStream is on: after each level, wait until its messages are published (needs -database-url)")
	_ = fs.Parse(args)

	s, err := run(context.Background(), o)
	if err != nil {
		return err
	}
	return saveSeries(o.save, s)
}

// series is one set of measurements: a server, a number of instances, and
// a result per connection count.
type series struct {
	Label     string  `json:"label"`
	Floor     bool    `json:"floor"`
	Instances int     `json:"instances"`
	Proxied   bool    `json:"proxied"`
	Levels    []level `json:"levels"`
	Paced     *level  `json:"paced,omitempty"`
	PeakRSS   []int64 `json:"peak_rss_bytes,omitempty"` // per instance
	Poison    int     `json:"poison"`
	// Peer: the series is of a peer (loadgen peer) of this mode.
	Peer string `json:"peer,omitempty"`
	// Grouped: the peer is grouped (loadgen peer -group), the least work.
	Grouped bool `json:"grouped,omitempty"`
	// Delivery: one endpoint was attached, and its deliveries measured.
	Delivery bool `json:"delivery,omitempty"`
	// NATS: publishing to NATS JetStream was on, and measured.
	NATS bool `json:"nats,omitempty"`
	// Pair: this run is one of the Pair-th pair of runs, one with a
	// feature on (With) and one without, one after the other; the report
	// sets each against its partner. PairOf is the feature: endpoint ("",
	// one attached: Delivery), sweep (Stripe's missed-event sweep) or
	// tracing.
	Pair   int    `json:"pair,omitempty"`
	PairOf string `json:"pair_of,omitempty"`
	With   bool   `json:"with,omitempty"`
}

// level is one wrk run and what followed it.
type level struct {
	Connections int       `json:"connections"`
	Events      int       `json:"events"` // distinct events sent (the floor: requests in the files)
	Offered     int       `json:"offered,omitempty"`
	Wrk         wrkResult `json:"wrk"`
	// E2ESeconds: from the first send until no inbox row is left
	// `received`; 0 when not measured.
	E2ESeconds float64    `json:"e2e_seconds"`
	Stored     int        `json:"stored"` // of the events sent, found in the inbox
	Ingest     batchStats `json:"ingest_batches"`
	Apply      batchStats `json:"apply_batches"`
	// With an endpoint attached: the messages written since the first
	// send, delivered to it by DeliverySeconds after the first send; the
	// deliveries still pending when the last event was applied.
	Messages        int     `json:"messages,omitempty"`
	DeliverySeconds float64 `json:"delivery_seconds,omitempty"`
	Backlog         int     `json:"delivery_backlog,omitempty"`
	// Budget: the database work of the level, when measured (-budget).
	Budget *budget `json:"budget,omitempty"`
	// With publishing to NATS on: the messages written since the first
	// send, all published (acknowledged by JetStream and marked) by
	// PublishSeconds after the first send; those not yet published when
	// the last event was applied.
	Published      int     `json:"nats_published,omitempty"`
	PublishSeconds float64 `json:"nats_publish_seconds,omitempty"`
	PublishBacklog int     `json:"nats_backlog,omitempty"`
	// With -stripe-api: from the first send until the last event was
	// applied, the events paygate's sweeps listed (paygate_sweep_events_total),
	// those of them they ingested as missing, the list pages the account
	// answered, and how many of the level's own events those carried.
	SweepListed int `json:"sweep_listed,omitempty"`
	SweepNew    int `json:"sweep_new,omitempty"`
	SweepPages  int `json:"sweep_pages,omitempty"`
	SweepOwn    int `json:"sweep_own,omitempty"`
	// With -traces: the spans the receiver took from the first send until
	// the end of the level (with -budget, 11 s after the last event was
	// applied: longer than the exporter's 5 s batching).
	Spans int64 `json:"spans,omitempty"`
}

func run(ctx context.Context, o runOptions) (series, error) {
	s := series{Label: o.label, Floor: o.floor, Peer: o.peer, Grouped: o.grouped, Instances: o.instances, Proxied: o.proxied, Delivery: o.delivery, NATS: o.nats,
		Pair: o.pair, With: o.with || o.delivery}
	if o.pair > 0 && o.pairOf != "endpoint" {
		s.PairOf = o.pairOf
	}
	switch {
	case (o.delivery || o.with) && o.pair <= 0:
		// Alone, a run's rate moves with the machine by more than a
		// feature costs: the report sets it against its partner.
		return s, errors.New("-delivery and -with need -pair: a run with a feature on is one of a pair with a run without")
	case o.peer != "" && o.peer != peerStore && o.peer != peerSync && o.peer != peerContract && o.peer != peerInbox:
		return s, fmt.Errorf("-peer %q: store, sync, contract or inbox", o.peer)
	case (o.peer == peerContract || o.peer == peerInbox) && !o.grouped:
		return s, fmt.Errorf("-peer %s: a %s peer is grouped (-grouped)", o.peer, o.peer)
	case o.grouped && o.peer == "":
		return s, errors.New("-grouped: of a -peer")
	case o.pair > 0 && (o.peer != "") != (o.pairOf == pairLimitEndpoint):
		return s, fmt.Errorf("-pair-of %s: of a -peer contract, and the only pairs of a peer", pairLimitEndpoint)
	case o.pairOf == pairLimitEndpoint && o.pair > 0 && o.peer != peerContract:
		return s, fmt.Errorf("-pair-of %s: of a -peer contract (with -endpoint when -with)", pairLimitEndpoint)
	case o.peer != "" && (o.floor || o.budget || o.delivery || o.nats):
		return s, errors.New("-peer: a peer is measured by its answers and its /count alone")
	case !slices.Contains([]string{"endpoint", "sweep", "tracing", pairLimitEndpoint}, o.pairOf):
		return s, fmt.Errorf("-pair-of %q: endpoint, sweep, tracing or %s", o.pairOf, pairLimitEndpoint)
	case o.with && o.pairOf == "endpoint":
		return s, errors.New("-with: an endpoint pair's run with one attached is -delivery")
	case o.with && o.pairOf == "sweep" && o.stripeAPI == "":
		return s, errors.New("-with -pair-of sweep needs -stripe-api: the sweep lists the run's events from it")
	case o.with && o.pairOf == "tracing" && o.traces == "":
		return s, errors.New("-with -pair-of tracing needs -traces: the spans are counted at the receiver")
	}
	target, err := url.Parse(o.url)
	if err != nil || target.Host == "" {
		return s, fmt.Errorf("-url %q: not an http URL", o.url)
	}
	levels, err := parseInts(o.levels)
	if err != nil {
		return s, fmt.Errorf("-levels: %w", err)
	}
	expect, err := parseExpect(o.expect)
	if err != nil {
		return s, fmt.Errorf("-expect: %w", err)
	}
	var pids []int
	if o.pids != "" {
		if pids, err = parseInts(o.pids); err != nil {
			return s, fmt.Errorf("-pids: %w", err)
		}
	}
	bases := strings.Split(o.metrics, ",")
	if o.metrics == "" {
		bases = []string{strings.TrimSuffix(o.url, target.RequestURI())}
	}
	var db *pgx.Conn
	if o.databaseURL != "" && !o.floor {
		if db, err = pgx.Connect(ctx, o.databaseURL); err != nil {
			return s, fmt.Errorf("connect to the database: %w", err)
		}
		defer db.Close(ctx)
	}
	var account *stripeAccount
	if o.stripeAPI != "" {
		account = newStripeAccount(o.stripeAPIKey)
		stop, err := account.serve(o.stripeAPI)
		if err != nil {
			return s, fmt.Errorf("-stripe-api: %w", err)
		}
		defer stop()
	}
	batch := 0
	// viewed: each measured level also gets PostgreSQL's own view of its
	// statements.
	viewed := false
	if o.budget && db != nil {
		if viewed, err = hasStatements(ctx, db); err != nil {
			return s, err
		}
	}
	prefix := filepath.Join(o.out, "requests-"+o.label)
	wrkRunOf := func(name string, conns int, d time.Duration) wrkRun {
		return wrkRun{bin: o.wrk, script: o.script, url: o.url, threads: o.threads, connections: conns,
			duration: d, timeout: 10 * time.Second, prefix: prefix, cycle: o.floor,
			output: filepath.Join(o.out, "wrk-"+o.label+"-"+name+".txt")}
	}
	// once runs one level of distinct events and waits for them to be
	// applied.
	once := func(name string, conns, events, rate int) (level, error) {
		if o.floor {
			// The floor stores nothing: the same requests go round for
			// the whole run.
			events = floorRequests
		}
		lv := level{Connections: conns, Events: events, Offered: rate}
		var ds []delivery
		if account != nil {
			pace := expected(expect, conns)
			if rate > 0 {
				pace = float64(rate)
			}
			ds = stampedEvents(events, o.refundShare, account.nextStart(), pace)
			batch++
			account.add(batch, ds)
		} else {
			ds = distinctEvents(events, o.refundShare)
		}
		expected := time.Duration(float64(time.Second) * o.seconds)
		if rate > 0 {
			expected = time.Duration(float64(time.Second) * float64(events) / float64(rate))
		}
		if err := writeRequests(prefix, ds, o.threads, o.secret, target); err != nil {
			return lv, fmt.Errorf("write the requests: %w", err)
		}
		w := wrkRunOf(name, conns, 4*expected+20*time.Second)
		w.rate = rate
		if o.floor {
			w.duration = expected
		}
		before := scrapeAll(bases)
		var countBefore, deliveredBefore int64
		if o.peer != "" {
			if countBefore, err = readCount(bases[0] + "/count"); err != nil {
				return lv, err
			}
		}
		if o.peer != "" && o.with && o.pairOf == pairLimitEndpoint {
			if deliveredBefore, err = readCount(bases[0] + "/delivered"); err != nil {
				return lv, fmt.Errorf("the peer delivers to no endpoint (loadgen peer -endpoint): %w", err)
			}
		}
		var pagesBefore int
		if account != nil {
			pagesBefore, _ = account.served(batch)
		}
		var spansBefore int64
		if o.traces != "" {
			if spansBefore, err = readCount(o.traces + "/spans"); err != nil {
				return lv, err
			}
		}
		var (
			dbBefore dbCounters
			machine  machineReadings
		)
		measure := o.budget && db != nil && name != "warmup" && name != "paced"
		if measure {
			if dbBefore, err = readDBCounters(ctx, db); err != nil {
				return lv, err
			}
			machine.read(readCPU(pids, o.receiverPID)) // the start
			if viewed {
				if err := resetStatements(ctx, db); err != nil {
					return lv, err
				}
			}
		}
		what := fmt.Sprintf("%d events", events)
		if rate > 0 {
			what += fmt.Sprintf(" at %d/s offered", rate)
		}
		fmt.Fprintf(os.Stderr, "loadgen: %s: wrk -t%d -c%d, %s\n", o.label, o.threads, conns, what)
		var profiled sync.WaitGroup
		if o.profileOut != "" && name == "c"+strconv.Itoa(slices.Max(levels)) {
			profiled.Add(1)
			go func() {
				defer profiled.Done()
				profile(bases[0], o.profileToken, int(min(20, max(1, o.seconds))), o.profileOut)
			}()
		}
		r, err := w.run(ctx)
		profiled.Wait()
		if err != nil {
			return lv, err
		}
		lv.Wrk = r
		if measure {
			machine.read(readCPU(pids, o.receiverPID)) // every event acknowledged
		}
		ingested := scrapeAll(bases)
		appliedAcknowledging := ingested.stats("paygate_apply_batch").Events - before.stats("paygate_apply_batch").Events
		if o.peer != "" {
			// A peer answers 200 once the event's transaction commits:
			// what it answered is stored (and, in sync, applied) by the
			// end of wrk's run.
			after, err := readCount(bases[0] + "/count")
			if err != nil {
				return lv, err
			}
			lv.Stored = int(after - countBefore)
			lv.E2ESeconds = r.Seconds
			if o.with && o.pairOf == pairLimitEndpoint {
				start := time.UnixMicro(r.FirstSend)
				if r.FirstSend == 0 {
					start = time.Now()
				}
				if lv.Messages, lv.Backlog, lv.DeliverySeconds, err = peerDelivered(bases[0], deliveredBefore, start, o.settle); err != nil {
					return lv, err
				}
			}
		} else if db != nil {
			start := time.UnixMicro(r.FirstSend)
			if r.FirstSend == 0 {
				start = time.Now()
			}
			took, err := settle(ctx, db, start, o.settle)
			if err != nil {
				return lv, err
			}
			lv.E2ESeconds = took.Seconds()
			if lv.Stored, s.Poison, err = stored(ctx, db, ds, s.Poison); err != nil {
				return lv, err
			}
			if o.delivery {
				if lv.Messages, lv.Backlog, took, err = delivered(ctx, db, start, o.settle); err != nil {
					return lv, err
				}
				lv.DeliverySeconds = took.Seconds()
			}
			if o.nats {
				if lv.Published, lv.PublishBacklog, took, err = published(ctx, db, start, o.settle); err != nil {
					return lv, err
				}
				lv.PublishSeconds = took.Seconds()
			}
		}
		if account != nil {
			lv.sweepRead(before, scrapeAll(bases), pagesBefore, account, batch)
		}
		if measure {
			// Before the wait below, in which paygate and the server idle.
			machine.read(readCPU(pids, o.receiverPID)) // every event applied (and delivered)
			// A backend reports its statistics at most once a second, and
			// an idle one within 10 s (PGSTAT_IDLE_INTERVAL).
			time.Sleep(11 * time.Second)
			dbAfter, err := readDBCounters(ctx, db)
			if err != nil {
				return lv, err
			}
			now := scrapeAll(bases)
			lv.Budget = &budget{
				Statements: now["paygate_db_statements_total"] - before["paygate_db_statements_total"],
				RoundTrips: now["paygate_db_round_trips_total"] - before["paygate_db_round_trips_total"],
				Rows:       dbAfter.rows - dbBefore.rows,
				WALBytes:   dbAfter.walBytes - dbBefore.walBytes,
				CPU:        machine[2].cpu.minus(machine[0].cpu),
				Machine:    machine.phases(appliedAcknowledging),
			}
			if viewed {
				if lv.Budget.Database, err = readStatements(ctx, db); err != nil {
					return lv, err
				}
			}
		}
		applied := scrapeAll(bases)
		if o.traces != "" {
			spans, err := readCount(o.traces + "/spans")
			if err != nil {
				return lv, err
			}
			lv.Spans = spans - spansBefore
		}
		lv.Ingest = ingested.stats("paygate_ingest_batch").minus(before.stats("paygate_ingest_batch"))
		lv.Apply = applied.stats("paygate_apply_batch").minus(before.stats("paygate_apply_batch"))
		return lv, nil
	}

	if db != nil && o.warmup > 0 {
		// A gateway in service has history, and PostgreSQL statistics of
		// it: on empty tables the plans cached for the ledger's
		// commit-time checks and River's queries are sequential scans
		// until autovacuum's first ANALYZE, a minute or more later.
		if o.peer == "" {
			if _, err := settle(ctx, db, time.Now(), o.settle); err != nil {
				return s, fmt.Errorf("before the warm-up: %w", err)
			}
		}
		lv, err := once("warmup", 64, o.warmup, 0)
		if err != nil {
			return s, fmt.Errorf("warm-up: %w", err)
		}
		if bad := lv.Wrk.Non2xx + lv.Wrk.socketErrors(); bad > 0 {
			return s, fmt.Errorf("warm-up: %d requests not answered 2xx or failed (first: %s)", bad, lv.Wrk.FirstBad)
		}
		if _, err := db.Exec(ctx, "ANALYZE"); err != nil {
			return s, fmt.Errorf("warm-up: analyze: %w", err)
		}
	}
	time.Sleep(o.hold)
	if o.with && o.pairOf == "sweep" {
		if err := awaitSweep(bases, 2*time.Minute); err != nil {
			return s, err
		}
	}
	for _, c := range levels {
		lv, err := once("c"+strconv.Itoa(c), c, int(o.seconds*expected(expect, c)), 0)
		if err != nil {
			return s, fmt.Errorf("%d connections: %w", c, err)
		}
		s.Levels = append(s.Levels, lv)
	}
	if o.rate > 0 {
		lv, err := once("paced", o.rateConns, int(float64(o.rate)*o.rateSeconds), o.rate)
		if err != nil {
			return s, fmt.Errorf("latency run: %w", err)
		}
		s.Paced = &lv
	}
	for _, p := range pids {
		s.PeakRSS = append(s.PeakRSS, peakRSS(p))
	}
	for t := range o.threads {
		_ = os.Remove(fmt.Sprintf("%s.%d", prefix, t))
		_ = os.Remove(fmt.Sprintf("%s.done.%d", prefix, t))
	}
	return s, nil
}

// sweepRead sets what paygate's sweeps listed between the scrapes before
// and after, the pages the account served since it had served
// pagesBefore, and how many of batch's events they carried.
func (lv *level) sweepRead(before, after metrics, pagesBefore int, account *stripeAccount, batch int) {
	known0, new0 := sweepCounts(before)
	known1, new1 := sweepCounts(after)
	lv.SweepListed, lv.SweepNew = int(known1+new1-known0-new0), int(new1-new0)
	pages, own := account.served(batch)
	lv.SweepPages, lv.SweepOwn = pages-pagesBefore, own
}

// sweepCounts are paygate_sweep_events_total's known and new events.
func sweepCounts(m metrics) (known, fresh float64) {
	for name, v := range m {
		if !strings.HasPrefix(name, "paygate_sweep_events_total{") {
			continue
		}
		switch {
		case strings.Contains(name, `result="known"`):
			known += v
		case strings.Contains(name, `result="new"`):
			fresh += v
		}
	}
	return known, fresh
}

// awaitSweep waits until paygate's sweep has listed events: its first
// runs one period after its instance leads, which would otherwise fall in
// the measured level, or never.
func awaitSweep(bases []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		known, fresh := sweepCounts(scrapeAll(bases))
		if known+fresh > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sweep listed nothing in %s (PAYGATE_STRIPE_SWEEP_EVERY, PAYGATE_STRIPE_API_URL and _KEY set? paygate_sweep_errors_total?)", timeout)
		}
		time.Sleep(time.Second)
	}
}

// readCount reads a count a receiver answers at url, a number on a line.
func readCount(url string) (int64, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a count", url, b)
	}
	return n, nil
}

// parseExpect reads "16=2500,64=4500": expected events/s by connections.
func parseExpect(s string) (map[int]float64, error) {
	out := map[int]float64{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		c, err1 := strconv.Atoi(k)
		r, err2 := strconv.ParseFloat(v, 64)
		if !ok || err1 != nil || err2 != nil || c <= 0 || r <= 0 {
			return nil, fmt.Errorf("%q: want connections=events/s", kv)
		}
		out[c] = r
	}
	return out, nil
}

// expected is the rate expected at c connections: as given, or
// interpolated on a log scale of the connections between the nearest two
// given (the nearest one outside them).
func expected(e map[int]float64, c int) float64 {
	if r, ok := e[c]; ok {
		return r
	}
	keys := make([]int, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if c < keys[0] {
		return e[keys[0]]
	}
	for i := 1; i < len(keys); i++ {
		if c < keys[i] {
			lo, hi := keys[i-1], keys[i]
			f := (math.Log(float64(c)) - math.Log(float64(lo))) / (math.Log(float64(hi)) - math.Log(float64(lo)))
			return e[lo] + f*(e[hi]-e[lo])
		}
	}
	return e[keys[len(keys)-1]]
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}

// settle waits until no inbox row is left `received` and returns how long
// that took from start. The poll is an EXISTS on the status index, which
// costs the same on an empty and on a full table.
func settle(ctx context.Context, db *pgx.Conn, start time.Time, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		var pending bool
		err := db.QueryRow(ctx, ownQuery+`SELECT EXISTS (SELECT 1 FROM inbox_events WHERE status = 'received')`).Scan(&pending)
		if err != nil {
			return 0, fmt.Errorf("poll the inbox: %w", err)
		}
		if !pending {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("events still received after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// delivered waits until every message written since start is delivered
// to every endpoint, and returns how many there were, how many
// deliveries were pending when it began (right after the last event was
// applied), and how long after start the last was delivered.
func delivered(ctx context.Context, db *pgx.Conn, start time.Time, timeout time.Duration) (messages, backlog int, took time.Duration, err error) {
	deadline := time.Now().Add(timeout)
	first := true
	for {
		var pending int
		var last *time.Time
		err := db.QueryRow(ctx, ownQuery+`SELECT
				(SELECT count(*) FROM messages WHERE created_at >= $1),
				(SELECT count(*) FROM deliveries WHERE status = 'pending'),
				(SELECT max(last_attempt_at) FROM deliveries WHERE message_created_at >= $1)`, start).
			Scan(&messages, &pending, &last)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("poll the deliveries: %w", err)
		}
		if first {
			backlog, first = pending, false
		}
		if pending == 0 && messages > 0 && last != nil {
			var fanned int
			if err := db.QueryRow(ctx, ownQuery+`SELECT count(*) FROM deliveries WHERE message_created_at >= $1`, start).Scan(&fanned); err != nil {
				return 0, 0, 0, fmt.Errorf("poll the deliveries: %w", err)
			}
			if fanned >= messages {
				return messages, backlog, last.Sub(start), nil
			}
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("deliveries still pending after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pairLimitEndpoint is the pairs of runs of a contract peer with an
// endpoint (loadgen peer -endpoint) and without: the limit for paygate's
// endpoint pairs.
const pairLimitEndpoint = "limit-endpoint"

// peerDelivered waits until a contract peer has no message left to
// deliver, and returns how many it delivered since before (any it could
// not is an error: the limit would have done less), how many were left
// when wrk's run ended, and how long after start the last was delivered.
func peerDelivered(base string, before int64, start time.Time, timeout time.Duration) (messages, backlog int, seconds float64, err error) {
	deadline := time.Now().Add(timeout)
	for first := true; ; first = false {
		pending, err := readCount(base + "/pending")
		if err != nil {
			return 0, 0, 0, err
		}
		if first {
			backlog = int(pending)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("the peer's messages still pending after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	failed, err := readCount(base + "/undelivered")
	if err != nil {
		return 0, 0, 0, err
	}
	if failed > 0 {
		return 0, 0, 0, fmt.Errorf("the peer could not deliver %d messages (its log says why)", failed)
	}
	n, err := readCount(base + "/delivered")
	if err != nil {
		return 0, 0, 0, err
	}
	last, err := readCount(base + "/last-delivered")
	if err != nil {
		return 0, 0, 0, err
	}
	return int(n - before), backlog, time.UnixMicro(last).Sub(start).Seconds(), nil
}

// published waits until the nats relay's position reaches the last
// message placed since start, none of them left unplaced, and returns how
// many messages there were, how many were not yet published when it began
// (right after the last event was applied), and how long after start the
// relay moved last.
func published(ctx context.Context, db *pgx.Conn, start time.Time, timeout time.Duration) (messages, backlog int, took time.Duration, err error) {
	deadline := time.Now().Add(timeout)
	first := true
	for {
		var (
			behind, unplaced int
			moved            time.Time
		)
		err := db.QueryRow(ctx, ownQuery+`
			WITH r AS (SELECT coalesce((SELECT position FROM message_relays WHERE name = 'nats'), 0) AS position,
				(SELECT updated_at FROM message_relays WHERE name = 'nats') AS updated_at)
			SELECT count(m.id), count(*) FILTER (WHERE m.position > r.position), count(*) FILTER (WHERE m.id IS NOT NULL AND m.position IS NULL),
				coalesce(max(r.updated_at), now())
			FROM r LEFT JOIN messages m ON m.created_at >= $1
			GROUP BY r.position`, start).Scan(&messages, &behind, &unplaced, &moved)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("poll the nats relay: %w", err)
		}
		if first {
			backlog, first = behind+unplaced, false
		}
		if messages > 0 && behind == 0 && unplaced == 0 {
			return messages, backlog, moved.Sub(start), nil
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("%d messages still not published to nats after %s (is PAYGATE_NATS_URL set?)", behind+unplaced, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stored counts the events of ds in the inbox, by their key, and adds
// those that are poison to poison.
func stored(ctx context.Context, db *pgx.Conn, ds []delivery, poison int) (int, int, error) {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.id
	}
	var n, p int
	err := db.QueryRow(ctx, ownQuery+`SELECT count(*), count(*) FILTER (WHERE status = 'poison') FROM inbox_events
		WHERE provider = 'stripe' AND event_id = ANY($1)`, ids).Scan(&n, &p)
	if err != nil {
		return 0, 0, fmt.Errorf("count the events in the inbox: %w", err)
	}
	return n, poison + p, nil
}

// peakRSS reads the process's high-water resident set (VmHWM) in bytes.
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// profile saves a CPU profile of the paygate at base.
func profile(base, token string, seconds int, out string) {
	req, _ := http.NewRequest(http.MethodGet, base+"/debug/pprof/profile?seconds="+strconv.Itoa(seconds), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	c := &http.Client{Timeout: time.Duration(seconds+10) * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: cpu profile: %v\n", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "loadgen: cpu profile: HTTP %d\n", resp.StatusCode)
		return
	}
	f, err := os.Create(out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: cpu profile: %v\n", err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
	fmt.Fprintf(os.Stderr, "loadgen: cpu profile saved to %s\n", out)
}

// batchStats are one of paygate's batching metrics (ingest group commit,
// or applying events): transactions, events in them, and time spent.
type batchStats struct {
	Count   float64 `json:"count"`
	Events  float64 `json:"events"`
	Seconds float64 `json:"seconds"`
}

func (a batchStats) minus(b batchStats) batchStats {
	return batchStats{Count: a.Count - b.Count, Events: a.Events - b.Events, Seconds: a.Seconds - b.Seconds}
}

// metrics are the samples of paygate's /metrics, by name, summed over
// the instances.
type metrics map[string]float64

// stats reads the batch histograms <prefix>_events and <prefix>_seconds.
func (m metrics) stats(prefix string) batchStats {
	return batchStats{Count: m[prefix+"_events_count"], Events: m[prefix+"_events_sum"], Seconds: m[prefix+"_seconds_sum"]}
}

// scrapeAll reads and sums the /metrics of every base URL; what cannot be
// read is left out.
func scrapeAll(bases []string) metrics {
	m := metrics{}
	c := &http.Client{Timeout: 10 * time.Second}
	for _, b := range bases {
		resp, err := c.Get(strings.TrimSpace(b) + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
		for sc.Scan() {
			name, value, ok := strings.Cut(sc.Text(), " ")
			if !ok || strings.HasPrefix(name, "#") {
				continue
			}
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				m[name] += v
			}
		}
		resp.Body.Close()
	}
	return m
}

// results are the series of one `make bench`, as saved.
type results struct {
	Series []series `json:"series"`
}

// saveSeries adds s to the results in path, replacing a series of the same
// label.
func saveSeries(path string, s series) error {
	var r results
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	r.Series = slices.DeleteFunc(r.Series, func(o series) bool { return o.Label == s.Label })
	r.Series = append(r.Series, s)
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// budget is the database work of one level: what paygate sent
// (statements, BEGIN and COMMIT included, and round trips) and what
// PostgreSQL did (rows inserted, updated or deleted in the database; WAL
// bytes of the whole server, so other databases' writes count too).
type budget struct {
	Statements float64     `json:"statements"`
	RoundTrips float64     `json:"round_trips"`
	Rows       float64     `json:"rows_written"`
	WALBytes   float64     `json:"wal_bytes"`
	CPU        cpuCounters `json:"cpu_seconds"`
	// Machine is how busy the machine's CPUs were in the level's two
	// phases; nil when /proc/stat could not be read.
	Machine *machinePhases `json:"machine,omitempty"`
	// Database is PostgreSQL's own view of the level's statements, when
	// the server has pg_stat_statements (make bench's BENCH_PGSS=1).
	Database *statementsView `json:"pg_stat_statements,omitempty"`
}

// cpuCounters are CPU seconds, user and system: of the paygate instances
// (-pids), of every PostgreSQL process on the machine (the server's, as
// its WAL is: another database's work counts too), and of the endpoint's
// receiver (-receiver-pid), which shares the cores.
type cpuCounters struct {
	Paygate  float64 `json:"paygate"`
	Postgres float64 `json:"postgres"`
	Receiver float64 `json:"receiver,omitempty"`
}

func readCPU(pids []int, receiverPID int) cpuCounters {
	var c cpuCounters
	for _, p := range pids {
		c.Paygate += proccpu.Of(p).Seconds()
	}
	c.Postgres = proccpu.Matching("postgres: ").Seconds()
	if receiverPID > 0 {
		c.Receiver = proccpu.Of(receiverPID).Seconds()
	}
	return c
}

func (c cpuCounters) minus(o cpuCounters) cpuCounters {
	return cpuCounters{Paygate: c.Paygate - o.Paygate, Postgres: c.Postgres - o.Postgres, Receiver: c.Receiver - o.Receiver}
}

// machinePhases is the share of the machine's CPUs (every process's, wrk
// and other tenants' too) at work while a level's events were being
// acknowledged, and afterwards until the last was applied: what is idle in
// a phase is time every party spent waiting (on a commit's flush, a timer,
// a lock), not computing. With it, paygate's and PostgreSQL's CPU in each
// phase, and how many events went through applying while acknowledging
// (the events of paygate's apply batches, a deferred one each time it was
// in one), so that acknowledging's cost and applying's can be told apart.
type machinePhases struct {
	IngestSeconds float64     `json:"ingest_seconds"`
	IngestBusy    float64     `json:"ingest_busy"` // 0 to 1
	IngestCPU     cpuCounters `json:"ingest_cpu_seconds"`
	TailSeconds   float64     `json:"tail_seconds"`
	TailBusy      float64     `json:"tail_busy"`
	TailCPU       cpuCounters `json:"tail_cpu_seconds"`
	// AppliedAcknowledging is the events applied while acknowledging.
	AppliedAcknowledging float64 `json:"applied_while_acknowledging"`
}

// machineReading is one proccpu.Machine reading, the processes' CPU read
// with it, and when it was taken.
type machineReading struct {
	busy, total time.Duration
	cpu         cpuCounters
	at          time.Time
}

// machineReadings are the readings at the start of a level, when every
// event was acknowledged, and when every one was applied.
type machineReadings []machineReading

func (m *machineReadings) read(cpu cpuCounters) {
	busy, total := proccpu.Machine()
	*m = append(*m, machineReading{busy, total, cpu, time.Now()})
}

// phases is nil unless all three readings were taken and counted ticks;
// applied is the events applied by the second.
func (m machineReadings) phases(applied float64) *machinePhases {
	if len(m) != 3 || m[1].total <= m[0].total || m[2].total <= m[1].total {
		return nil
	}
	share := func(i int) float64 {
		return float64(m[i+1].busy-m[i].busy) / float64(m[i+1].total-m[i].total)
	}
	return &machinePhases{
		IngestSeconds: m[1].at.Sub(m[0].at).Seconds(), IngestBusy: share(0), IngestCPU: m[1].cpu.minus(m[0].cpu),
		TailSeconds: m[2].at.Sub(m[1].at).Seconds(), TailBusy: share(1), TailCPU: m[2].cpu.minus(m[1].cpu),
		AppliedAcknowledging: applied,
	}
}

type dbCounters struct{ rows, walBytes float64 }

func readDBCounters(ctx context.Context, db *pgx.Conn) (dbCounters, error) {
	var c dbCounters
	err := db.QueryRow(ctx, ownQuery+`SELECT
		(SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables)::float8,
		(SELECT wal_bytes FROM pg_stat_wal)::float8`).Scan(&c.rows, &c.walBytes)
	if err != nil {
		return c, fmt.Errorf("read the database's statistics: %w", err)
	}
	return c, nil
}
