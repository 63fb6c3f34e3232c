package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
)

// floorCommand serves the floor server until SIGTERM or SIGINT.
func floorCommand(args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18090", "listen address")
	secrets := fs.String("secrets", "", "comma-separated webhook secrets, as PAYGATE_STRIPE_WEBHOOK_SECRETS")
	_ = fs.Parse(args)
	e := floorServer(stripe.NewReceiver(strings.Split(*secrets, ","), 0), 1<<20)
	fmt.Fprintf(os.Stderr, "loadgen: floor server on %s\n", *addr)
	return serveUntilSignal(func() error { return e.Start(*addr) }, e.Shutdown)
}

// serveUntilSignal runs serve until it fails or SIGTERM or SIGINT asks
// shutdown to stop it, giving in-flight requests five seconds.
func serveUntilSignal(serve func() error, shutdown func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}()
	if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// floorServer is what answering a Stripe webhook costs with no database:
// Echo, the body read whole, paygate's own signature check and envelope
// decoding (provider/stripe's Receiver), and the 200 body paygate answers
// for a new event. It bounds from above what any ingest path can reach on
// this machine with this sender; paygate's logging, metrics and request
// middleware are left out on purpose, they are part of what is measured
// against it.
func floorServer(r provider.Receiver, maxBody int64) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/webhooks/stripe", func(c echo.Context) error {
		req := c.Request()
		body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, maxBody))
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, "could not read the request body")
		}
		events, err := r.Receive(req.Header, body, time.Now())
		if err != nil {
			return echo.NewHTTPError(http.StatusBadRequest, err.Error())
		}
		answer := r.Acknowledge(events, make([]bool, len(events)))
		return c.Blob(answer.Status, answer.ContentType, answer.Body)
	})
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	return e
}
