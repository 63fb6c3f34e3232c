package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// The alert rules and the dashboard in deploy/ name paygate's metrics and
// their labels; this test scrapes a running paygate that has done a bit of
// everything (webhooks applied, a message delivered and published to NATS,
// an email, a reconciliation run, a sweep) and fails when either names a
// metric or a label it does not export.

// targetLabels are added by Prometheus to every series it scrapes; le is
// a histogram bucket's.
var targetLabels = []string{"instance", "job", "le"}

// exported reads a Prometheus text exposition into metric name → label
// names.
func exported(t *testing.T, body io.Reader) map[string]map[string]bool {
	t.Helper()
	series := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s`)
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
	out := map[string]map[string]bool{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := series.FindStringSubmatch(line)
		require.NotNil(t, m, "exposition line %q", line)
		if out[m[1]] == nil {
			out[m[1]] = map[string]bool{}
		}
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			out[m[1]][l[1]] = true
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// query is one PromQL expression of deploy/, with where it is and the
// labels its legend names.
type query struct {
	where, expr string
	legend      []string
}

// ruleQueries are the expr of every rule in alerts.yml (a one-line value
// or a block scalar).
func ruleQueries(t *testing.T, path string) []query {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []query
	lines := strings.Split(string(raw), "\n")
	alert := ""
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if v, ok := strings.CutPrefix(trimmed, "- alert:"); ok {
			alert = strings.TrimSpace(v)
		}
		v, ok := strings.CutPrefix(trimmed, "expr:")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if v == "|" || v == ">" {
			indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
			var block []string
			for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent) {
				i++
				block = append(block, lines[i])
			}
			v = strings.Join(block, "\n")
		}
		out = append(out, query{where: path + " " + alert, expr: v})
	}
	return out
}

// dashboardQueries are the expr of every panel target and the queries of
// the dashboard's variables, with the labels each legend names.
func dashboardQueries(t *testing.T, path string) []query {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	legend := regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	var out []query
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			q := query{where: path + " " + p.Title, expr: tg.Expr}
			for _, m := range legend.FindAllStringSubmatch(tg.LegendFormat, -1) {
				q.legend = append(q.legend, m[1])
			}
			out = append(out, q)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			out = append(out, query{where: path + " variable " + v.Name, expr: v.Definition})
		}
	}
	return out
}

var (
	metricRe   = regexp.MustCompile(`\bpaygate_[a-z0-9_]+\b`)
	selectorRe = regexp.MustCompile(`\b(paygate_[a-z0-9_]+)\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupingRe = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelFnRe  = regexp.MustCompile(`label_values\(\s*paygate_[a-z0-9_]+\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)`)
	templateRe = regexp.MustCompile(`\$\{?[a-zA-Z_]+\}?`)
)

// checkQuery reports what q names that paygate does not export: a
// metric, a label in a selector of that metric, or a label it groups by
// or shows in its legend that none of its metrics has.
func checkQuery(q query, have map[string]map[string]bool) []string {
	var problems []string
	expr := templateRe.ReplaceAllString(q.expr, "x")
	names := metricRe.FindAllString(expr, -1)
	if len(names) == 0 {
		return []string{q.where + ": names no paygate metric: " + q.expr}
	}
	labelsOfAny := func(l string) bool {
		if slices.Contains(targetLabels, l) {
			return true
		}
		for _, n := range names {
			if have[n][l] {
				return true
			}
		}
		return false
	}
	for _, n := range names {
		if have[n] == nil {
			problems = append(problems, q.where+": metric "+n+" is not exported")
		}
	}
	for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			if have[m[1]] != nil && !have[m[1]][l[1]] && !slices.Contains(targetLabels, l[1]) {
				problems = append(problems, q.where+": "+m[1]+" has no label "+l[1])
			}
		}
	}
	var grouped []string
	for _, m := range groupingRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			grouped = append(grouped, strings.TrimSpace(l))
		}
	}
	for _, m := range labelFnRe.FindAllStringSubmatch(expr, -1) {
		grouped = append(grouped, m[1])
	}
	for _, l := range append(grouped, q.legend...) {
		if l != "" && !labelsOfAny(l) {
			problems = append(problems, q.where+": no metric of "+strings.Join(names, ", ")+" has label "+l)
		}
	}
	return problems
}

// TestDeployNamesOnlyExportedMetrics: every metric and label the alert
// rules and the Grafana dashboard use is one a running paygate exports.
func TestDeployNamesOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	pool, dbURL := testdb.NewWithURL(t)
	nats := startJetStream(t)
	endpoint := newTraceparentEndpoint(t)
	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	stripeAPI := httptest.NewServer(sim.Handler())
	t.Cleanup(stripeAPI.Close)
	s := startServer(t, dbURL,
		"PAYGATE_NATS_URL="+nats.url(),
		"PAYGATE_DELIVERY_ALLOW_PRIVATE=true",
		"PAYGATE_STRIPE_API_KEY="+sim.APIKey(),
		"PAYGATE_STRIPE_API_URL="+stripeAPI.URL,
		"PAYGATE_STRIPE_SWEEP_EVERY=2s",
		"PAYGATE_OPS_EMAIL=ops@example.com",
	)
	registerEndpoint(t, s, endpoint.srv.URL)
	sim.Pay(stripesim.PayOpts{Amount: 4200, Currency: "usd", Email: "buyer-deploy@example.com"})
	_, err := sim.Deliver(context.Background(), "http://"+s.addr+"/webhooks/stripe", sim.Events(), &stripesim.DeliverOpts{Concurrency: 2})
	require.NoError(t, err)
	s.awaitProcessed(t, len(sim.Events()))
	// A completed day's run, as `paygate reconcile` leaves one, so the
	// reconciliation series exist.
	_, err = pool.Exec(context.Background(), `INSERT INTO reconciliation_runs (provider, date, trigger, status, finished_at, report)
		VALUES ('stripe', current_date - 1, 'cli', 'completed', now(), '{}')`)
	require.NoError(t, err)

	queries := append(ruleQueries(t, "../../deploy/prometheus/alerts.yml"), dashboardQueries(t, "../../deploy/grafana/paygate.json")...)
	require.Greater(t, len(queries), 30, "the rules and the dashboard were read")
	var (
		have     map[string]map[string]bool
		problems []string
	)
	// Some series appear once their work has run (the message delivered
	// and published, the email job, the sweep): scrape until none is
	// missing, or report what still is.
	deadline := time.Now().Add(45 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/metrics")
		require.NoError(t, err)
		have = exported(t, resp.Body)
		resp.Body.Close()
		problems = problems[:0]
		for _, q := range queries {
			problems = append(problems, checkQuery(q, have)...)
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	sort.Strings(problems)
	require.Empty(t, problems, "deploy/ names what paygate does not export")
}

// TestDeployCheckFindsWhatIsNotExported: the check itself catches a
// misspelt metric, a label the metric lacks, and a legend or grouping
// label none of the query's metrics has.
func TestDeployCheckFindsWhatIsNotExported(t *testing.T) {
	have := exported(t, strings.NewReader(`# HELP paygate_webhooks_total x
# TYPE paygate_webhooks_total counter
paygate_webhooks_total{provider="stripe",result="received"} 3
paygate_inbox_events{status="poison"} 0
paygate_http_request_duration_seconds_bucket{route="/x",method="GET",status="OK",le="0.5"} 1
`))
	for _, c := range []struct {
		q    query
		want string
	}{
		{query{where: "ok", expr: `sum by (provider) (rate(paygate_webhooks_total{result="received", instance=~"$instance"}[5m]))`, legend: []string{"provider"}}, ""},
		{query{where: "ok", expr: `histogram_quantile(0.99, sum by (le, route) (rate(paygate_http_request_duration_seconds_bucket[5m])))`}, ""},
		{query{where: "metric", expr: `paygate_webhook_total > 0`}, "metric paygate_webhook_total is not exported"},
		{query{where: "selector", expr: `paygate_inbox_events{state="poison"} > 0`}, "paygate_inbox_events has no label state"},
		{query{where: "grouping", expr: `sum by (endpoint_id) (paygate_webhooks_total)`}, "has label endpoint_id"},
		{query{where: "legend", expr: `paygate_inbox_events`, legend: []string{"kind"}}, "has label kind"},
		{query{where: "nothing", expr: `up == 0`}, "names no paygate metric"},
	} {
		got := checkQuery(c.q, have)
		if c.want == "" {
			require.Empty(t, got, c.q.expr)
			continue
		}
		require.Len(t, got, 1, c.q.expr)
		require.Contains(t, got[0], c.want)
	}
}
