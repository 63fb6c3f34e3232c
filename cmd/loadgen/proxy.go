package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// proxyCommand serves the round-robin proxy until SIGTERM or SIGINT.
func proxyCommand(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18100", "listen address")
	backends := fs.String("backends", "", "comma-separated base URLs of the paygate instances")
	_ = fs.Parse(args)
	var targets []*url.URL
	for _, b := range strings.Split(*backends, ",") {
		u, err := url.Parse(strings.TrimSpace(b))
		if err != nil || u.Host == "" {
			return fmt.Errorf("-backends: %q is not a URL", b)
		}
		targets = append(targets, u)
	}
	srv := &http.Server{Addr: *addr, Handler: newProxy(targets), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "loadgen: proxy on %s to %s\n", *addr, *backends)
	return serveUntilSignal(srv.ListenAndServe, srv.Shutdown)
}

// newProxy sends each request to the next of targets in turn, over pooled
// keep-alive connections, as a load balancer in front of several gateway
// instances would. A backend that fails answers 502, which wrk counts,
// and the error is logged.
func newProxy(targets []*url.URL) *httputil.ReverseProxy {
	var next atomic.Uint64
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			t := targets[(next.Add(1)-1)%uint64(len(targets))]
			r.SetURL(t)
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		ErrorLog: log.New(os.Stderr, "loadgen: proxy: ", log.LstdFlags),
	}
}
