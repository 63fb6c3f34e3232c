package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrkRun is one run of wrk with scripts/bench.lua.
type wrkRun struct {
	bin, script string
	url         string
	threads     int
	connections int
	duration    time.Duration // wrk's -d: the whole run in cycle mode, a bound in once mode
	timeout     time.Duration // wrk's --timeout: slower answers count as timeout errors
	prefix      string        // the request files, as writeRequests wrote them
	cycle       bool
	rate        int    // requests/s offered, 0: as fast as answered
	output      string // where wrk's own output is saved
}

// wrkResult is what wrk printed: its own summary, and the "bench:" lines
// of scripts/bench.lua's done().
type wrkResult struct {
	Requests      int64   `json:"requests"`       // answers wrk counted
	Seconds       float64 `json:"seconds"`        // wrk's duration
	RequestsPerS  float64 `json:"requests_per_s"` // wrk's Requests/sec
	P50, P90, P99 float64 // ms, wrk's latency distribution
	P999, Max     float64
	Mean          float64
	Connect       int64  `json:"connect_errors"`
	Read          int64  `json:"read_errors"`
	Write         int64  `json:"write_errors"`
	Timeout       int64  `json:"timeout_errors"`
	Status        int64  `json:"non_2xx_or_3xx"` // wrk's "Non-2xx or 3xx responses" (status > 399)
	Non2xx        int64  `json:"non_2xx"`        // answers outside 200-299, counted by the script
	FirstBad      string `json:"first_bad,omitempty"`
	Sent          int64  `json:"sent"`           // requests the threads handed to wrk
	Answered      int64  `json:"answered"`       // answers the threads saw
	Loaded        int64  `json:"loaded"`         // requests in the files
	FirstSend     int64  `json:"first_send_us"`  // Unix µs of the first request
	LastAnswer    int64  `json:"last_answer_us"` // Unix µs of the last answer
}

// socketErrors are wrk's socket errors of every kind.
func (r wrkResult) socketErrors() int64 { return r.Connect + r.Read + r.Write + r.Timeout }

func (w wrkRun) args() []string {
	mode := "once"
	if w.cycle {
		mode = "cycle"
	}
	return []string{
		"-t" + strconv.Itoa(w.threads), "-c" + strconv.Itoa(w.connections),
		"-d" + strconv.Itoa(int(w.duration.Seconds())) + "s", "--timeout", strconv.Itoa(int(w.timeout.Seconds())) + "s",
		"--latency", "-s", w.script, w.url,
		"--", w.prefix, strconv.Itoa(w.threads), mode, strconv.Itoa(w.rate),
	}
}

// run runs wrk, saves its output and reads it.
func (w wrkRun) run(ctx context.Context) (wrkResult, error) {
	cmd := exec.CommandContext(ctx, w.bin, w.args()...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if w.output != "" {
		_ = os.WriteFile(w.output, []byte(strings.Join(append([]string{w.bin}, w.args()...), " ")+"\n"+out.String()), 0o644)
	}
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %w: %s", err, lastLines(out.String(), 5))
	}
	r, err := parseWrk(out.String())
	if err != nil {
		return r, fmt.Errorf("wrk's output (%s): %w", w.output, err)
	}
	return r, nil
}

var (
	wrkRate  = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)`)
	wrkPairs = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|[-0-9.]+)`)
)

// parseWrk reads wrk's output of a run with scripts/bench.lua.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	m := wrkRate.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no Requests/sec line")
	}
	r.RequestsPerS, _ = strconv.ParseFloat(m[1], 64)
	seen := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "bench: ")
		if !ok {
			continue
		}
		seen = true
		kv := map[string]string{}
		for _, p := range wrkPairs.FindAllStringSubmatch(line, -1) {
			kv[p[1]] = p[2]
		}
		num := func(k string) int64 { n, _ := strconv.ParseInt(kv[k], 10, 64); return n }
		msOf := func(k string) float64 { f, _ := strconv.ParseFloat(kv[k], 64); return f / 1000 }
		switch {
		case strings.HasPrefix(line, "duration_us="):
			r.Seconds = float64(num("duration_us")) / 1e6
			r.Requests = num("requests")
			r.Connect, r.Read, r.Write = num("connect"), num("read"), num("write")
			r.Status, r.Timeout = num("status"), num("timeout")
		case strings.HasPrefix(line, "latency_us "):
			r.P50, r.P90, r.P99, r.P999 = msOf("p50"), msOf("p90"), msOf("p99"), msOf("p999")
			r.Max, r.Mean = msOf("max"), msOf("mean")
		case strings.HasPrefix(line, "thread="):
			r.Loaded += num("requests")
			r.Sent += num("sent")
			r.Answered += num("answered")
			r.Non2xx += num("non2xx")
			if fb, err := strconv.Unquote(kv["first_bad"]); err == nil && r.FirstBad == "" {
				r.FirstBad = fb
			}
			if t := num("first_send_us"); t > 0 && (r.FirstSend == 0 || t < r.FirstSend) {
				r.FirstSend = t
			}
			r.LastAnswer = max(r.LastAnswer, num("last_answer_us"))
		}
	}
	if !seen {
		return r, fmt.Errorf("no bench: lines (is this scripts/bench.lua's wrk?)")
	}
	return r, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " / ")
}
