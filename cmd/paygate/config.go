package main

import (
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/delivery/natsjs"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stdwebhooks"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/statemachine"
	"github.com/paygate/paygate/webhook"
)

// config is paygate's configuration, read from the environment only.
type config struct {
	DatabaseURL    string
	Addr           string
	StripeSecrets  []string
	AdyenHMACKeys  [][]byte
	AdyenBasicAuth string
	// Adyen's Checkout API, for refunds: on when the key and the merchant
	// account are set.
	AdyenAPIKey          string
	AdyenMerchantAccount string
	AdyenCheckoutURL     string
	StandardSources      []stdwebhooks.Source
	StripeAPIKey         string
	StripeAPIURL         string
	OpsTokens            []string
	FinanceTokens        []string
	ProcessMaxAttempts   int
	MaxBodyBytes         int64
	SMTPURL              string
	EmailFrom            string
	OpsEmail             string
	FinanceEmail         string
	ReconcileAt          string
	ShutdownTimeout      time.Duration
	RefundTimeout        time.Duration
	PayloadRetention     time.Duration // zero: forever
	ConsumerTokens       []string
	// Downstream: messages and their delivery.
	MessageRetention     time.Duration
	DeliveryAllowPrivate bool
	DeliveryTimeout      time.Duration
	DeliverySchedule     []time.Duration
	DeliveryDisableAfter time.Duration
	// NATS JetStream: publishing is on when NATSURL is set.
	NATSURL           string
	NATSCreds         string
	NATSStream        string
	NATSSubjectPrefix string
	// TrustedProxies: whose X-Forwarded-For gives a request's client
	// address (the limit on failed authentications counts per address).
	TrustedProxies []netip.Prefix

	// Adyen's reports, for the reconciliation of settlement batches: on
	// when the report user and its password are set.
	AdyenReportUser     string
	AdyenReportPassword string
	AdyenReportHosts    []string
	// GLAccounts and XeroTaxRate render the journal exports
	// (PAYGATE_GL_ACCOUNTS, PAYGATE_GL_XERO_TAX_RATE).
	GLAccounts  ledger.GLAccounts
	XeroTaxRate string
	// BooksCurrency is the currency Xero's and QuickBooks' journal
	// exports are in (PAYGATE_BOOKS_CURRENCY).
	BooksCurrency string
	// StripeReferenceKey is the metadata key of a Stripe payment's order
	// reference (PAYGATE_STRIPE_REFERENCE_KEY).
	StripeReferenceKey string
	// StripeSweepEvery and StripeSweepRate are the missed-event sweep's
	// period (zero: off) and its list requests a second
	// (PAYGATE_STRIPE_SWEEP_EVERY, PAYGATE_STRIPE_SWEEP_RATE).
	StripeSweepEvery time.Duration
	StripeSweepRate  float64
	// Signin is how people sign in to the console (PAYGATE_OIDC_*,
	// PAYGATE_PUBLIC_URL, PAYGATE_CONSOLE_TOKENS, PAYGATE_SESSION_MAX_AGE).
	Signin signinConfig
}

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/paygate?sslmode=disable"

// defaultReconcileAt is the daily reconciliation's schedule (UTC) without
// PAYGATE_RECONCILE_AT.
const defaultReconcileAt = "0 2 * * *"

func loadConfig(getenv func(string) string) (config, error) {
	c := config{
		DatabaseURL:        or(getenv("DATABASE_URL"), defaultDatabaseURL),
		Addr:               or(getenv("PAYGATE_ADDR"), "127.0.0.1:8080"),
		StripeSecrets:      list(getenv("PAYGATE_STRIPE_WEBHOOK_SECRETS")),
		StripeAPIKey:       getenv("PAYGATE_STRIPE_API_KEY"),
		StripeAPIURL:       strings.TrimRight(or(getenv("PAYGATE_STRIPE_API_URL"), "https://api.stripe.com"), "/"),
		OpsTokens:          list(getenv("PAYGATE_OPS_TOKENS")),
		FinanceTokens:      list(getenv("PAYGATE_FINANCE_TOKENS")),
		ConsumerTokens:     list(getenv("PAYGATE_CONSUMER_TOKENS")),
		ProcessMaxAttempts: jobs.DefaultProcessMaxAttempts,
		MaxBodyBytes:       webhook.DefaultMaxBodyBytes,
		SMTPURL:            getenv("PAYGATE_SMTP_URL"),
		EmailFrom:          getenv("PAYGATE_EMAIL_FROM"),
		OpsEmail:           getenv("PAYGATE_OPS_EMAIL"),
		FinanceEmail:       getenv("PAYGATE_FINANCE_EMAIL"),
		ReconcileAt:        or(getenv("PAYGATE_RECONCILE_AT"), defaultReconcileAt),
		ShutdownTimeout:    20 * time.Second,
		StripeReferenceKey: or(strings.TrimSpace(getenv("PAYGATE_STRIPE_REFERENCE_KEY")), stripe.DefaultReferenceKey),
	}
	if n := len(c.StripeReferenceKey); n > statemachine.MaxMetadataKeyLen {
		return c, fmt.Errorf("PAYGATE_STRIPE_REFERENCE_KEY must be a Stripe metadata key, at most %d characters, got %d",
			statemachine.MaxMetadataKeyLen, n)
	}
	err := api.CheckTokens(c.OpsTokens, c.FinanceTokens, c.ConsumerTokens)
	if err != nil {
		return c, err
	}
	if err := c.loadDownstream(getenv); err != nil {
		return c, err
	}
	if err := c.loadNATS(getenv); err != nil {
		return c, err
	}
	if c.Signin, err = loadSignin(getenv); err != nil {
		return c, err
	}
	if c.TrustedProxies, err = api.ParseTrustedProxies(list(getenv("PAYGATE_TRUSTED_PROXIES"))); err != nil {
		return c, fmt.Errorf("PAYGATE_TRUSTED_PROXIES: %w", err)
	}
	if c.GLAccounts, err = ledger.ParseGLAccounts(getenv("PAYGATE_GL_ACCOUNTS")); err != nil {
		return c, fmt.Errorf("PAYGATE_GL_ACCOUNTS: %w", err)
	}
	c.XeroTaxRate = or(strings.TrimSpace(getenv("PAYGATE_GL_XERO_TAX_RATE")), api.DefaultXeroTaxRate)
	if c.BooksCurrency, err = booksCurrency(getenv("PAYGATE_BOOKS_CURRENCY")); err != nil {
		return c, err
	}
	if err := c.loadSweep(getenv); err != nil {
		return c, err
	}
	if v := getenv("PAYGATE_PROCESS_MAX_ATTEMPTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return c, fmt.Errorf("PAYGATE_PROCESS_MAX_ATTEMPTS must be a whole number from 1 to 1000, got %q", v)
		}
		c.ProcessMaxAttempts = n
	}
	if v := getenv("PAYGATE_REFUND_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second || d > 5*time.Minute {
			return c, fmt.Errorf("PAYGATE_REFUND_TIMEOUT must be a duration from 1s to 5m, such as 30s, got %q", v)
		}
		c.RefundTimeout = d
	}
	if c.PayloadRetention, err = payloadRetention(getenv("PAYGATE_PAYLOAD_RETENTION")); err != nil {
		return c, err
	}
	if v := getenv("PAYGATE_MAX_BODY_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1024 {
			return c, fmt.Errorf("PAYGATE_MAX_BODY_BYTES must be a whole number of at least 1024, got %q", v)
		}
		c.MaxBodyBytes = n
	}
	for _, s := range c.StripeSecrets {
		if !strings.HasPrefix(s, "whsec_") {
			return c, fmt.Errorf("PAYGATE_STRIPE_WEBHOOK_SECRETS: every secret starts with whsec_ (one does not)")
		}
	}
	keys, err := adyen.ParseKeys(getenv("PAYGATE_ADYEN_HMAC_KEYS"))
	if err != nil {
		return c, fmt.Errorf("PAYGATE_ADYEN_HMAC_KEYS: %w", err)
	}
	c.AdyenHMACKeys = keys
	if v := getenv("PAYGATE_ADYEN_BASIC_AUTH"); v != "" {
		if user, password, ok := strings.Cut(v, ":"); !ok || user == "" || password == "" {
			return c, fmt.Errorf("PAYGATE_ADYEN_BASIC_AUTH must be user:password")
		}
		c.AdyenBasicAuth = v
	}
	c.AdyenAPIKey = getenv("PAYGATE_ADYEN_API_KEY")
	c.AdyenMerchantAccount = getenv("PAYGATE_ADYEN_MERCHANT_ACCOUNT")
	c.AdyenCheckoutURL = strings.TrimRight(or(getenv("PAYGATE_ADYEN_CHECKOUT_URL"), adyen.DefaultCheckoutURL), "/")
	if (c.AdyenAPIKey == "") != (c.AdyenMerchantAccount == "") {
		return c, fmt.Errorf("PAYGATE_ADYEN_API_KEY and PAYGATE_ADYEN_MERCHANT_ACCOUNT are set together (refunds need both)")
	}
	if u, err := url.Parse(c.AdyenCheckoutURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return c, fmt.Errorf("PAYGATE_ADYEN_CHECKOUT_URL must be an absolute https URL such as %s", adyen.DefaultCheckoutURL)
	}
	c.AdyenReportUser = getenv("PAYGATE_ADYEN_REPORT_USER")
	c.AdyenReportPassword = getenv("PAYGATE_ADYEN_REPORT_PASSWORD")
	if (c.AdyenReportUser == "") != (c.AdyenReportPassword == "") {
		return c, fmt.Errorf("PAYGATE_ADYEN_REPORT_USER and PAYGATE_ADYEN_REPORT_PASSWORD are set together (report downloads need both)")
	}
	if c.AdyenReportHosts, err = adyen.ParseReportHosts(getenv("PAYGATE_ADYEN_REPORT_HOSTS")); err != nil {
		return c, fmt.Errorf("PAYGATE_ADYEN_REPORT_HOSTS: %w", err)
	}
	if len(c.AdyenReportHosts) == 0 {
		c.AdyenReportHosts = adyen.DefaultReportHosts
	}
	if c.StandardSources, err = stdwebhooks.ParseSources(getenv("PAYGATE_STANDARD_WEBHOOK_SOURCES")); err != nil {
		return c, fmt.Errorf("PAYGATE_STANDARD_WEBHOOK_SOURCES: %w", err)
	}
	return c, nil
}

// minPayloadRetention keeps a payload at least as long as anything may
// still need it: Stripe retries for three days, reconciliation looks back
// a day or two, and a partition holds a month.
const minPayloadRetention = 30 * 24 * time.Hour

// payloadRetention reads PAYGATE_PAYLOAD_RETENTION: "forever" (or empty),
// or a number of days such as "400d".
func payloadRetention(v string) (time.Duration, error) {
	if v == "" || v == "forever" {
		return 0, nil
	}
	days, ok := strings.CutSuffix(v, "d")
	n, err := strconv.Atoi(days)
	if !ok || err != nil || time.Duration(n)*24*time.Hour < minPayloadRetention || n > 36500 {
		return 0, fmt.Errorf("PAYGATE_PAYLOAD_RETENTION must be forever or a number of days from 30d, such as 400d, got %q", v)
	}
	return time.Duration(n) * 24 * time.Hour, nil
}

// loadDownstream reads the configuration of messages and their delivery.
func (c *config) loadDownstream(getenv func(string) string) error {
	c.MessageRetention = outbox.DefaultRetention
	if v := getenv("PAYGATE_MESSAGE_RETENTION"); v != "" {
		days, ok := strings.CutSuffix(v, "d")
		n, err := strconv.Atoi(days)
		if !ok || err != nil || n < 1 || n > 3650 {
			return fmt.Errorf("PAYGATE_MESSAGE_RETENTION must be a number of days from 1d, such as 30d, got %q", v)
		}
		c.MessageRetention = time.Duration(n) * 24 * time.Hour
	}
	switch v := getenv("PAYGATE_DELIVERY_ALLOW_PRIVATE"); v {
	case "", "false":
	case "true":
		c.DeliveryAllowPrivate = true
	default:
		return fmt.Errorf("PAYGATE_DELIVERY_ALLOW_PRIVATE must be true or false, got %q", v)
	}
	c.DeliveryTimeout = delivery.DefaultTimeout
	if v := getenv("PAYGATE_DELIVERY_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			return fmt.Errorf("PAYGATE_DELIVERY_TIMEOUT must be a duration from 100ms to 1m, such as 15s, got %q", v)
		}
		c.DeliveryTimeout = d
	}
	c.DeliverySchedule = delivery.DefaultSchedule
	if v := getenv("PAYGATE_DELIVERY_RETRY_SCHEDULE"); v != "" {
		sched, err := delivery.ParseSchedule(v)
		if err != nil {
			return fmt.Errorf("PAYGATE_DELIVERY_RETRY_SCHEDULE: %w", err)
		}
		c.DeliverySchedule = sched
	}
	c.DeliveryDisableAfter = delivery.DefaultDisableAfter
	if v := getenv("PAYGATE_DELIVERY_DISABLE_AFTER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return fmt.Errorf("PAYGATE_DELIVERY_DISABLE_AFTER must be a duration of at least 1s, such as 120h, got %q", v)
		}
		c.DeliveryDisableAfter = d
	}
	return nil
}

// loadNATS reads the configuration of publishing to NATS JetStream.
func (c *config) loadNATS(getenv func(string) string) error {
	c.NATSURL = getenv("PAYGATE_NATS_URL")
	c.NATSCreds = getenv("PAYGATE_NATS_CREDS")
	c.NATSStream = or(getenv("PAYGATE_NATS_STREAM"), natsjs.DefaultStream)
	c.NATSSubjectPrefix = or(getenv("PAYGATE_NATS_SUBJECT_PREFIX"), natsjs.DefaultSubjectPrefix)
	if err := natsjs.CheckNames(c.NATSStream, c.NATSSubjectPrefix); err != nil {
		return fmt.Errorf("PAYGATE_NATS_STREAM, PAYGATE_NATS_SUBJECT_PREFIX: %w", err)
	}
	if c.NATSURL == "" && c.NATSCreds != "" {
		return fmt.Errorf("PAYGATE_NATS_CREDS is set without PAYGATE_NATS_URL")
	}
	if c.NATSCreds != "" {
		if _, err := os.Stat(c.NATSCreds); err != nil {
			return fmt.Errorf("PAYGATE_NATS_CREDS: %w", err)
		}
	}
	return nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func getenv(k string) string { return os.Getenv(k) }

// booksCurrency reads PAYGATE_BOOKS_CURRENCY: a currency the ledger knows,
// as an ISO 4217 code in either case (the ledger writes it lowercase);
// empty, api.DefaultBooksCurrency.
func booksCurrency(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return api.DefaultBooksCurrency, nil
	}
	c := strings.ToLower(v)
	if _, err := ledger.Exponent(c); err != nil {
		return "", fmt.Errorf("PAYGATE_BOOKS_CURRENCY must be the ISO 4217 code of a currency paygate knows, the one the general ledger is kept in, such as usd, eur or gbp; got %q", v)
	}
	return c, nil
}
