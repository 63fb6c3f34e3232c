package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// receiveCommand serves the endpoint make bench attaches to paygate: it
// answers every POST 200 at once, having read the body, so that what is
// measured is paygate's delivery, not the receiver's work. GET /count
// answers how many POSTs it took.
func receiveCommand(args []string) error {
	fs := flag.NewFlagSet("receive", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:9000", "listen address")
	_ = fs.Parse(args)
	var n atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		n.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, n.Load()) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}
