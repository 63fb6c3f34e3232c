package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/delivery/natsjs"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stdwebhooks"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/tracing"
	"github.com/paygate/paygate/webhook"
)

func cmdServe(ctx context.Context, cfg config, logger *slog.Logger) error {
	tuneGC()
	tr, logger, err := startTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer func() { _ = tr.Shutdown(context.WithoutCancel(ctx)) }() // the spans still queued leave last
	statements := &statementCounter{}
	pool, err := openMigratedPool(ctx, cfg, 40, poolTracer(tr, statements))
	if err != nil {
		return err
	}
	defer pool.Close()
	logDurability(ctx, pool, cfg, logger)

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), statements)

	var jobClient *jobs.Client
	var ingestPressure func() bool // set below, before the workers start
	reconcileHook, err := reconcileWorkers(cfg, pool, logger, func() *jobs.Client { return jobClient })
	if err != nil {
		return err
	}
	sweepHook, sweepQueues := sweepWorkers(cfg, pool, logger, registry, func() *jobs.Client { return jobClient })
	downloaders, err := reportDownloaders(cfg, logger)
	if err != nil {
		return err
	}
	guard := delivery.GuardConfig{AllowPrivate: cfg.DeliveryAllowPrivate}
	sender := delivery.NewSender(delivery.SenderConfig{Guard: guard, Timeout: cfg.DeliveryTimeout, TracerProvider: tr.TracerProvider()})
	dispatcher := delivery.NewDispatcher(delivery.DispatcherConfig{
		Pool:         pool,
		Sender:       sender,
		Schedule:     cfg.DeliverySchedule,
		DisableAfter: cfg.DeliveryDisableAfter,
		OpsEmail:     cfg.OpsEmail,
		Logger:       logger,
		Metrics:      delivery.NewMetrics(pool, registry, logger),
	})
	if cfg.DeliveryAllowPrivate {
		logger.Warn("PAYGATE_DELIVERY_ALLOW_PRIVATE is true: endpoints may use http and private addresses (development only)")
	}
	natsPublisher, err := newNATSPublisher(ctx, cfg, pool, logger, registry, tr)
	if err != nil {
		return err
	}
	defer natsPublisher.Close()
	jobClient, err = jobs.NewClient(pool, jobs.Config{
		Logger:             logger,
		ProcessMaxAttempts: cfg.ProcessMaxAttempts,
		StripeReferenceKey: cfg.StripeReferenceKey,
		Email:              jobs.EmailConfig{SMTPURL: cfg.SMTPURL, From: cfg.EmailFrom, OpsEmail: cfg.OpsEmail, FinanceEmail: cfg.FinanceEmail},
		Register: func(w *river.Workers) []*river.PeriodicJob {
			river.AddWorker(w, &delivery.DeliverWorker{Dispatcher: dispatcher})
			if natsPublisher != nil {
				river.AddWorker(w, &natsjs.Worker{Publisher: natsPublisher})
			}
			periodic := reconcileHook(w)
			if sweepHook != nil {
				periodic = append(periodic, sweepHook(w)...)
			}
			return periodic
		},
		Queues:            withQueues(map[string]river.QueueConfig{delivery.QueueDelivery: {MaxWorkers: deliveryWorkers}}, sweepQueues),
		MessageRetention:  cfg.MessageRetention,
		Refunders:         refunders(cfg, logger),
		ReportDownloaders: downloaders,
		RefundCallTimeout: cfg.RefundTimeout,
		PayloadRetention:  cfg.PayloadRetention,
		Registerer:        registry,
		IngestPressure:    func() bool { return ingestPressure != nil && ingestPressure() },
		TracerProvider:    tr.TracerProvider(),
	})
	if err != nil {
		return err
	}
	registry.MustRegister(jobs.NewQueueCollector(pool, jobClient.Queues()...), jobs.EmailCollector(), jobs.NewHealthCollector(pool), reconcile.NewCollector(pool))
	if cfg.SMTPURL == "" {
		logger.Warn("PAYGATE_SMTP_URL is empty: emails are recorded as skipped, none is sent")
	}

	e, apiServer := api.NewEcho(api.Config{
		Pool:           pool,
		Jobs:           jobClient,
		OpsTokens:      cfg.OpsTokens,
		FinanceTokens:  cfg.FinanceTokens,
		ConsumerTokens: cfg.ConsumerTokens,
		Delivery:       delivery.NewStore(pool, guard),
		NATS:           natsPublisher,
		Logger:         logger,
		Registry:       registry,
		RiverUI:        true,
		// A run the server cannot perform is refused when asked for.
		ReconcileUnavailable: reconcileUnavailable(cfg),
		TrustedProxies:       cfg.TrustedProxies,
		GLAccounts:           cfg.GLAccounts,
		XeroTaxRate:          cfg.XeroTaxRate,
		TracerProvider:       tr.TracerProvider(),
		BooksCurrency:        cfg.BooksCurrency,
		Durability:           durabilityRecovery(cfg),
	})
	con, err := newConsole(ctx, cfg, e, pool, apiServer.TokenOf, logger)
	if err != nil {
		return err
	}
	con.Register(e)
	ingester, closeIngester := newIngester(pool, jobClient, logger, registry)
	if b, ok := ingester.(*webhook.BatchIngester); ok {
		ingestPressure = b.UnderPressure
	}
	defer closeIngester() // after the HTTP server's shutdown: in-flight batches commit first
	receivers, sources, err := webhookReceivers(cfg)
	if err != nil {
		return err
	}
	webhook.NewHandler(webhook.Config{
		Ingester:     ingester,
		Receivers:    receivers,
		Sources:      sources,
		MaxBodyBytes: cfg.MaxBodyBytes,
		Logger:       logger,
		Registerer:   registry,
	}).Register(e)
	if len(cfg.StripeSecrets) == 0 {
		logger.Warn("PAYGATE_STRIPE_WEBHOOK_SECRETS is empty: POST /webhooks/stripe answers 503")
	}
	if len(cfg.AdyenHMACKeys) == 0 {
		logger.Warn("PAYGATE_ADYEN_HMAC_KEYS is empty: POST /webhooks/adyen answers 503")
	} else if cfg.AdyenBasicAuth == "" {
		logger.Warn("PAYGATE_ADYEN_BASIC_AUTH is empty: an Adyen item's HMAC covers only some of its fields; set Basic auth in Adyen and here")
	}

	srv := &http.Server{
		Addr:              cfg.Addr,
		Handler:           e,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second, // GET /v1/feed may wait 30 s for a message
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}

	if err := apiServer.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	if err := jobClient.River.Start(ctx); err != nil {
		ln.Close()
		return fmt.Errorf("start workers: %w", err)
	}
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		delivery.NewRelay(delivery.RelayConfig{Pool: pool, River: jobClient.River, Logger: logger,
			AfterStep: func(ctx context.Context) error { return natsPublisher.Kick(ctx, jobClient.River) }}).Run(relayCtx)
	}()
	defer func() { stopRelay(); <-relayDone }()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("paygate serving", "addr", ln.Addr().String())

	select {
	case err := <-serveErr:
		stopWorkers(jobClient, cfg.ShutdownTimeout, logger)
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}

	// Stop taking requests and let in-flight ones finish (each is answered
	// only after its commit), then let running jobs finish; jobs still
	// running at the deadline are cancelled and River retries them later.
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("http shutdown", "error", err.Error())
	}
	stopWorkers(jobClient, cfg.ShutdownTimeout, logger)
	logger.Info("stopped")
	return nil
}

// newNATSPublisher connects to NATS JetStream when PAYGATE_NATS_URL is set
// (nil otherwise: publishing off) and creates the stream when missing. A
// server that cannot be reached is logged, not fatal: messages wait in the
// outbox, and the publisher's job retries.
func newNATSPublisher(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer, tr *tracing.Tracing) (*natsjs.Publisher, error) {
	if cfg.NATSURL == "" {
		return nil, nil
	}
	p, err := natsjs.New(natsjs.Config{
		URL: cfg.NATSURL, Creds: cfg.NATSCreds, Stream: cfg.NATSStream, SubjectPrefix: cfg.NATSSubjectPrefix,
		MaxAge: cfg.MessageRetention, Pool: pool, OpsEmail: cfg.OpsEmail, Logger: logger, Registerer: reg,
		TracerProvider: tr.TracerProvider(),
	})
	if err != nil {
		return nil, fmt.Errorf("PAYGATE_NATS_URL: %w", err)
	}
	if err := p.EnsureStream(ctx); err != nil {
		logger.Warn("nats: the stream could not be checked at start; publishing retries until it can", "error", err.Error())
	}
	return p, nil
}

// deliveryWorkers is how many endpoints are sent to at once per instance:
// a dispatcher is one endpoint's, so a hanging endpoint holds one worker,
// never another endpoint's.
const deliveryWorkers = 32

func stopWorkers(c *jobs.Client, timeout time.Duration, logger *slog.Logger) {
	soft, cancel := context.WithTimeout(context.Background(), timeout/2)
	defer cancel()
	if err := c.River.Stop(soft); err == nil {
		return
	}
	hard, cancel2 := context.WithTimeout(context.Background(), timeout/2)
	defer cancel2()
	if err := c.River.StopAndCancel(hard); err != nil {
		logger.Warn("workers did not stop in time", "error", err.Error())
	}
}

// ingestMode selects how the webhook endpoint commits: "batch" (group
// refunders are the providers paygate can start refunds at: Stripe, when
// PAYGATE_STRIPE_API_KEY is set, and Adyen, when PAYGATE_ADYEN_API_KEY and
// PAYGATE_ADYEN_MERCHANT_ACCOUNT are. A refund request for a provider
// without one is refused at once (422), never accepted to fail later.
func refunders(cfg config, logger *slog.Logger) map[string]provider.Refunder {
	out := map[string]provider.Refunder{}
	if api, err := stripeProvider(cfg, nil); err == nil {
		out[stripe.Name] = api
	} else {
		logger.Warn("PAYGATE_STRIPE_API_KEY is empty: refunds of Stripe payments cannot be started from paygate")
	}
	if cfg.AdyenAPIKey != "" && cfg.AdyenMerchantAccount != "" {
		api, err := adyen.NewAPI(adyen.APIConfig{APIKey: cfg.AdyenAPIKey, MerchantAccount: cfg.AdyenMerchantAccount,
			CheckoutURL: cfg.AdyenCheckoutURL, Timeout: cfg.RefundTimeout})
		if err != nil {
			logger.Warn("the Adyen refund client could not be built: refunds of Adyen payments cannot be started from paygate", "error", err.Error())
		} else {
			out[adyen.Name] = api
		}
	} else {
		logger.Warn("PAYGATE_ADYEN_API_KEY or PAYGATE_ADYEN_MERCHANT_ACCOUNT is empty: refunds of Adyen payments cannot be started from paygate")
	}
	return out
}

// webhookReceivers builds each provider's Receiver from the configuration:
// Stripe and Adyen always (without keys they answer 503, so that their
// senders retry), and one per Standard Webhooks source.
func webhookReceivers(cfg config) (receivers, sources []provider.Receiver, err error) {
	ad, err := adyen.NewReceiver(adyen.Config{HMACKeys: cfg.AdyenHMACKeys, BasicAuth: cfg.AdyenBasicAuth})
	if err != nil {
		return nil, nil, fmt.Errorf("adyen: %w", err)
	}
	receivers = []provider.Receiver{stripe.NewReceiver(cfg.StripeSecrets, 0), ad}
	for _, src := range cfg.StandardSources {
		r, err := stdwebhooks.NewReceiver(src)
		if err != nil {
			return nil, nil, fmt.Errorf("standard webhooks source %s: %w", src.Name, err)
		}
		sources = append(sources, r)
	}
	return receivers, sources, nil
}

// commit, webhook.BatchIngester: concurrent events share a transaction) or
// "tx" (webhook.TxIngester: one transaction per event). It is an internal
// switch, not configuration, since the contract is the same either way; a
// benchmark compares the two with a binary built with
// -ldflags '-X main.ingestMode=tx'.
var ingestMode = "batch"

func newIngester(pool *pgxpool.Pool, enq webhook.Enqueuer, logger *slog.Logger, reg prometheus.Registerer) (webhook.Ingester, func()) {
	if ingestMode == "tx" {
		return &webhook.TxIngester{Pool: pool, Enqueue: enq}, func() {}
	}
	b := webhook.NewBatchIngester(webhook.BatchConfig{Pool: pool, Enqueue: enq, Logger: logger, Registerer: reg})
	return b, func() { _ = b.Close() }
}

// Garbage collector defaults for serve, each unless set in the environment
// (GOGC, GOMEMLIMIT): collect when the heap has grown to five times what
// is live instead of twice, since every webhook allocates its body and its
// decoding and the live heap is small (collection took a tenth of serve's
// CPU under load with Go's default, and RSS stays near 120 MiB instead of
// 70); and a soft limit of 160 MiB, past which the collector works harder
// rather than let the heap grow.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(160 << 20)
	}
}
