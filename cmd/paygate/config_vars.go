package main

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/delivery/natsjs"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/signin"
	"github.com/paygate/paygate/sweep"
	"github.com/paygate/paygate/tracing"
	"github.com/paygate/paygate/webhook"
)

// configVar is one environment variable paygate reads. configVars is the
// one reference of them: `paygate config` prints it, docs/configuration.md
// is generated from it, and a test holds it to the variables the code
// reads, both ways.
type configVar struct {
	Name string
	// Meaning, Default and Example are Markdown; links are relative to
	// docs/.
	Meaning string
	Default string
	Example string
	// ReadBy names the commands that act on the variable (every command
	// checks the whole configuration at start).
	ReadBy []string
	// SDK marks a variable the OpenTelemetry SDK reads itself, not
	// paygate's code.
	SDK bool
}

// configGroup is a table of the reference, under its heading.
type configGroup struct {
	Title string
	Vars  []configVar
}

// The commands that act on the settings most commands share.
var (
	readByDatabase = []string{"migrate", "serve", "sweep", "reconcile", "poison", "refund", "ledger", "doctor"}
	readByStripe   = []string{"serve", "reconcile", "sweep", "doctor", "demo"}
)

var configVars = []configGroup{
	{Title: "Database and server", Vars: []configVar{
		{Name: "DATABASE_URL",
			Meaning: "PostgreSQL URL; `pool_max_conns=N` in it sets `serve`'s pool (default 40 connections): instances sharing one server split its `max_connections`. `migrate` runs as the database's owner, the rest as `paygate_app` ([Database roles](operations.md#database-roles))",
			Default: code(defaultDatabaseURL), Example: code("postgres://paygate_app@db.internal/paygate?pool_max_conns=20"),
			ReadBy: readByDatabase},
		{Name: "PAYGATE_ADDR", Meaning: "listen address; `demo` sends its shop's webhooks there",
			Default: code("127.0.0.1:8080"), Example: code("0.0.0.0:8080"), ReadBy: []string{"serve", "demo"}},
		{Name: "PAYGATE_MAX_BODY_BYTES", Meaning: "largest webhook body accepted",
			Default: code(strconv.Itoa(webhook.DefaultMaxBodyBytes)), Example: code("2097152"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_TRUSTED_PROXIES",
			Meaning: "comma-separated addresses or CIDRs of the proxies in front of paygate whose `X-Forwarded-For` is believed: a request's client address (what [failed authentications](api.md#authentication) are counted against) is its connection's, unless that is a trusted proxy; then the rightmost `X-Forwarded-For` entry that is not one",
			Default: "none: the connection's address, always", Example: code("10.0.0.0/8,192.168.1.10"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_PROCESS_MAX_ATTEMPTS", Meaning: "attempts before a failing event is [poison](operations.md#poison-queue)",
			Default: code(strconv.Itoa(jobs.DefaultProcessMaxAttempts)), Example: code("5"), ReadBy: []string{"serve", "reconcile", "sweep", "poison"}},
		{Name: "PAYGATE_PAYLOAD_RETENTION",
			Meaning: "how long raw payloads are kept: `forever`, or a number of days from `30d` (e.g. `400d`); a month's inbox partition is dropped once its last day is older than this and none of its events is `received` or `poison`. Dedupe keys, the ledger, payments and attempt history are kept forever either way ([Payload retention](operations.md#runbook))",
			Default: code("forever"), Example: code("400d"), ReadBy: []string{"serve"}},
	}},
	{Title: "Providers", Vars: []configVar{
		{Name: "PAYGATE_STRIPE_WEBHOOK_SECRETS", Meaning: "comma-separated `whsec_…` secrets of [Stripe's webhooks](providers.md#stripe), all accepted (rotation)",
			Default: "none: `POST /webhooks/stripe` answers 503", Example: code("whsec_new…,whsec_old…"), ReadBy: []string{"serve", "demo", "doctor"}},
		{Name: "PAYGATE_STRIPE_API_KEY",
			Meaning: "Stripe's API key (a restricted key reading balance transactions and events, and writing refunds, is enough): the daily [reconciliation](finance.md#reconciliation), the missed-event sweep and [refunds](operations.md#refunds)",
			Default: "none: no daily run, and `POST /v1/reconciliation/runs` answers 503 (nothing recorded); no sweep; refunds of Stripe payments answer 422",
			Example: code("rk_live_…"), ReadBy: readByStripe},
		{Name: "PAYGATE_STRIPE_API_URL", Meaning: "Stripe's API base, without `/v1` (a simulator's in development)",
			Default: code("https://api.stripe.com"), Example: code("http://127.0.0.1:12111"), ReadBy: readByStripe},
		{Name: "PAYGATE_STRIPE_REFERENCE_KEY",
			Meaning: "the key of a Stripe PaymentIntent's (or a charge without one's) `metadata` that holds the shop's order reference, the payment's `reference` ([Whose money](operations.md#whose-money-the-merchants-references)); at most 40 characters",
			Default: code(stripe.DefaultReferenceKey), Example: code("order_number"), ReadBy: []string{"serve", "reconcile", "sweep"}},
		{Name: "PAYGATE_STRIPE_SWEEP_EVERY",
			Meaning: "how often the [missed-event sweep](operations.md#missed-event-sweep) lists Stripe's events, with `PAYGATE_STRIPE_API_KEY`: a duration from `1s` to `24h`, or `0` (off)",
			Default: code(shortDuration(sweep.DefaultEvery)), Example: code("2m"), ReadBy: []string{"serve", "doctor"}},
		{Name: "PAYGATE_STRIPE_SWEEP_RATE", Meaning: "the sweep's list requests a second, at most; above 0, at most 100 (Stripe's live limit, shared with everything else the key does)",
			Default: code(strconv.Itoa(sweep.DefaultRate)), Example: code("5"), ReadBy: []string{"serve", "sweep"}},
		{Name: "PAYGATE_ADYEN_HMAC_KEYS", Meaning: "comma-separated hex HMAC keys of [Adyen's standard webhooks](providers.md#adyen), all accepted (rotation)",
			Default: "none: `/webhooks/adyen` answers 503", Example: code("44782def…,0123abcd…"), ReadBy: []string{"serve", "demo", "doctor"}},
		{Name: "PAYGATE_ADYEN_BASIC_AUTH", Meaning: "`user:password` Adyen must send as Basic auth (set the same in Adyen's webhook settings)",
			Default: "none: not required", Example: code("adyen:s3cret…"), ReadBy: []string{"serve", "demo", "doctor"}},
		{Name: "PAYGATE_ADYEN_API_KEY",
			Meaning: "Adyen's Checkout API key, sent as `X-API-Key`, for [refunds of Adyen payments](providers.md#refunds-of-adyen-payments); set with `PAYGATE_ADYEN_MERCHANT_ACCOUNT` or not at all",
			Default: "none: refunds of Adyen payments answer 422", Example: code("AQE…"), ReadBy: []string{"serve", "doctor", "demo"}},
		{Name: "PAYGATE_ADYEN_MERCHANT_ACCOUNT", Meaning: "the merchant account refunds are made from; set with `PAYGATE_ADYEN_API_KEY` or not at all",
			Default: "none", Example: code("ShopECOM"), ReadBy: []string{"serve", "doctor", "demo"}},
		{Name: "PAYGATE_ADYEN_CHECKOUT_URL", Meaning: "Adyen's Checkout API base, version included (live: `https://{prefix}-checkout-live.adyenpayments.com/checkout/v71`)",
			Default: code(adyen.DefaultCheckoutURL), Example: code("https://1797a841fbb37ca7-AdyenDemo-checkout-live.adyenpayments.com/checkout/v71"),
			ReadBy: []string{"serve", "doctor"}},
		{Name: "PAYGATE_ADYEN_REPORT_USER",
			Meaning: "Adyen's report user (`report_…@Company.…`), sent as Basic auth to download the settlement reports `REPORT_AVAILABLE` announces; set with `PAYGATE_ADYEN_REPORT_PASSWORD` or not at all ([settlement batches](finance.md#adyen-settlement-batches))",
			Default: "none: announced reports are refused, and Adyen's batches are not reconciled", Example: code("report_123456@Company.Shop"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_ADYEN_REPORT_PASSWORD", Meaning: "the report user's password",
			Default: "none", Example: code("…"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_ADYEN_REPORT_HOSTS",
			Meaning: "comma-separated hosts reports may be downloaded from, `host` (https, port 443) or `host:port`; a host given as an IP address may also be reached over `http` and on a private address",
			Default: code(strings.Join(adyen.DefaultReportHosts, ",")), Example: code("ca-live.adyen.com"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_STANDARD_WEBHOOK_SOURCES",
			Meaning: "comma-separated `source=whsec_…` entries of [Standard Webhooks](providers.md#standard-webhooks) senders; a source twice is a rotation; names are `[a-z0-9][a-z0-9_-]*`, not `stripe` or `adyen`",
			Default: "none: `/webhooks/standard/…` answers 503", Example: code("polar=whsec_…,dodo=whsec_…"), ReadBy: []string{"serve", "doctor"}},
		{Name: "PAYGATE_REFUND_TIMEOUT",
			Meaning: "how long one call to the provider's refund API may take before it counts as indeterminate (retried with the same key); a crashed worker's refund is rescued this long plus 10 s after it started",
			Default: code("30s"), Example: code("45s"), ReadBy: []string{"serve"}},
	}},
	{Title: "Roles and sign-in", Vars: []configVar{
		{Name: "PAYGATE_OPS_TOKENS",
			Meaning: "comma-separated bearer tokens of the `ops` role; an entry `name:token` names its operator (`[a-z0-9._-]+`), who is then the caller and the audit log's `actor` (a bare token is `token:` and a hash prefix); a name once per role and always with the same token (list it in both for both roles), a token under one name: anything else stops `serve` at start. A token containing `:` needs a name ([Authentication](api.md#authentication))",
			Default: "none", Example: code("ann:3b9f…,bob:c01d…"), ReadBy: []string{"serve", "demo", "doctor"}},
		{Name: "PAYGATE_FINANCE_TOKENS", Meaning: "the same, for the `finance` role",
			Default: "none", Example: code("carol:77ae…"), ReadBy: []string{"serve", "demo"}},
		{Name: "PAYGATE_CONSUMER_TOKENS",
			Meaning: "the same, for the `consumer` role, which reads [`GET /v1/feed`](downstream.md#feed) and nothing else",
			Default: "none", Example: code("orders:9c2e…"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_OIDC_ISSUER",
			Meaning: "the company's OpenID Connect provider, its issuer URL: the console's sign-in page offers it ([Signing in](operations.md#signing-in-with-your-identity-provider)); set with `PAYGATE_OIDC_CLIENT_ID` and `PAYGATE_OIDC_CLIENT_SECRET` or not at all",
			Default: "none: role tokens only", Example: code("https://id.example.com/realms/acme"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_OIDC_CLIENT_ID", Meaning: "paygate's client at the provider",
			Default: "none", Example: code("paygate"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_OIDC_CLIENT_SECRET", Meaning: "that client's secret",
			Default: "none", Example: code("…"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_PUBLIC_URL",
			Meaning: "the scheme and host browsers reach paygate at (no path); the provider sends people back to `<PAYGATE_PUBLIC_URL>/console/oidc/callback`, and an `https` URL makes the sign-in's cookie `Secure`. Required with `PAYGATE_OIDC_ISSUER`",
			Default: "none", Example: code("https://paygate.example.com"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_OIDC_ROLES_CLAIM",
			Meaning: "the ID token claim whose values (a string or a list) give roles; a dotted name steps into objects (`realm_access.roles`) unless a claim has that exact name",
			Default: code(signin.DefaultRolesClaim), Example: code("realm_access.roles"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_OIDC_ROLES",
			Meaning: "comma-separated `role=value` entries mapping the claim's values to `ops` and `finance`; a role again for another value that grants it (`ops=sre,ops=oncall`)",
			Default: code(signin.DefaultRoles), Example: code("ops=sre,ops=oncall,finance=accounting"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_OIDC_SCOPES",
			Meaning: "scopes asked for besides `openid`, comma- or space-separated (add `groups` for Okta, or for a Keycloak client scope named so)",
			Default: code(defaultOIDCScopes), Example: code("email,profile,groups"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_CONSOLE_TOKENS",
			Meaning: "`false` turns the console's token form off (people then sign in only with the provider; role tokens keep working on `/v1`), and ends token sessions; needs `PAYGATE_OIDC_ISSUER`",
			Default: code("true"), Example: code("false"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_SESSION_MAX_AGE", Meaning: "how long a console session lasts at most from sign-in, `1m` to `720h`",
			Default: code(shortDuration(defaultSessionMaxAge)), Example: code("8h"), ReadBy: []string{"serve"}},
	}},
	{Title: "Email", Vars: []configVar{
		{Name: "PAYGATE_SMTP_URL", Meaning: "where [emails](operations.md#emails) are sent: `smtp://host:port` (STARTTLS when offered) or `smtps://user:pass@host:port`",
			Default: "none: emails are recorded as `skipped`", Example: code("smtps://paygate:…@smtp.example.com:465"), ReadBy: []string{"serve", "doctor"}},
		{Name: "PAYGATE_EMAIL_FROM", Meaning: "the emails' sender address",
			Default: "none", Example: code("paygate@example.com"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_OPS_EMAIL", Meaning: "where ops alerts go (poison events, disputes, failed refunds, disabled endpoints, double charges…)",
			Default: "none: alerts go to nobody", Example: code("payments-oncall@example.com"), ReadBy: []string{"serve", "sweep", "doctor"}},
		{Name: "PAYGATE_FINANCE_EMAIL",
			Meaning: "where a reconciliation alert goes (a run that failed, or completed with items other than `matched`/`fee_posted`), one per run",
			Default: "`PAYGATE_OPS_EMAIL`", Example: code("finance@example.com"), ReadBy: []string{"serve"}},
	}},
	{Title: "Reconciliation and books", Vars: []configVar{
		{Name: "PAYGATE_RECONCILE_AT", Meaning: "daily [reconciliation](finance.md#reconciliation) time, UTC, cron syntax",
			Default: code(defaultReconcileAt), Example: code("30 4 * * *"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_GL_ACCOUNTS",
			Meaning: "comma-separated `account=code` entries naming the chart's accounts in the general ledger for the [journal exports](finance.md#books): a code for Xero, an account name (`Sales:Online`) for QuickBooks; an entry that is not `account=code`, an account outside the chart, an account twice or an empty code stops every command at start",
			Default: "none: accounts export under their own names", Example: code("sales=4000,refunds=4010,fees=6100,provider_balance=1200"), ReadBy: []string{"serve", "ledger"}},
		{Name: "PAYGATE_GL_XERO_TAX_RATE",
			Meaning: "the tax rate name Xero's journal lines carry, as Xero's tax settings spell it (`Tax Exempt`, `No VAT`, `No GST`, `BAS Excluded`…)",
			Default: code(api.DefaultXeroTaxRate), Example: code("No VAT"), ReadBy: []string{"serve", "ledger"}},
		{Name: "PAYGATE_BOOKS_CURRENCY",
			Meaning: "the currency the general ledger is kept in: Xero's and QuickBooks' [journal exports](finance.md#exports-in-one-base-currency) are in it only (an ISO 4217 code, either case; one paygate does not know stops every command at start)",
			Default: code(api.DefaultBooksCurrency), Example: code("eur"), ReadBy: []string{"serve", "ledger"}},
	}},
	{Title: "Downstream", Vars: []configVar{
		{Name: "PAYGATE_MESSAGE_RETENTION",
			Meaning: "how long [messages](downstream.md#messages) are kept, a number of days; a month of them leaves whole once past it and delivered everywhere",
			Default: code(days(outbox.DefaultRetention)), Example: code("90d"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_DELIVERY_ALLOW_PRIVATE",
			Meaning: "`true` lets [endpoints](downstream.md#endpoints) use `http` and loopback, private and link-local addresses: development only (`make run` sets it)",
			Default: code("false"), Example: code("true"), ReadBy: []string{"serve", "doctor"}},
		{Name: "PAYGATE_DELIVERY_TIMEOUT", Meaning: "how long one delivery attempt may take, connecting to reading the answer",
			Default: code(shortDuration(delivery.DefaultTimeout)), Example: code("5s"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_DELIVERY_RETRY_SCHEDULE", Meaning: "the waits before each retry of a failed delivery, comma-separated Go durations",
			Default: code(durations(delivery.DefaultSchedule)), Example: code("10s,1m,10m,1h"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_DELIVERY_DISABLE_AFTER", Meaning: "how long an endpoint may fail every attempt before it is disabled",
			Default: code(shortDuration(delivery.DefaultDisableAfter)), Example: code("72h"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_NATS_URL",
			Meaning: "NATS server(s) to publish every message to JetStream, comma-separated, credentials in the URL if needed ([NATS JetStream](downstream.md#nats-jetstream))",
			Default: "none: not published", Example: code("nats://user:…@nats.internal:4222"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_NATS_CREDS", Meaning: "a NATS credentials file (`.creds`)",
			Default: "none", Example: code("/etc/paygate/nats.creds"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_NATS_STREAM", Meaning: "the JetStream stream, created at start when missing",
			Default: code(natsjs.DefaultStream), Example: code("PAYMENTS"), ReadBy: []string{"serve"}},
		{Name: "PAYGATE_NATS_SUBJECT_PREFIX", Meaning: "the subjects' prefix: `<prefix>.<type>`",
			Default: code(natsjs.DefaultSubjectPrefix), Example: code("shop.paygate"), ReadBy: []string{"serve"}},
	}},
	{Title: "Tracing", Vars: []configVar{
		{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
			Meaning: "the OTLP/HTTP endpoint spans are sent to, the full URL; this or `OTEL_EXPORTER_OTLP_ENDPOINT` turns [tracing](operations.md#traces) on; it wins over `OTEL_EXPORTER_OTLP_ENDPOINT`",
			Default: "none: tracing off, nothing set up", Example: code("http://otel-collector:4318/v1/traces"), ReadBy: []string{"serve"}},
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Meaning: "the OTLP/HTTP base URL (`/v1/traces` is added)",
			Default: "none: tracing off", Example: code("http://otel-collector:4318"), ReadBy: []string{"serve"}},
		{Name: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Meaning: "the OTLP protocol: paygate sends `http/protobuf` and refuses to start with another",
			Default: code("http/protobuf"), Example: code("http/protobuf"), ReadBy: []string{"serve"}},
		{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Meaning: "the same, for every signal",
			Default: code("http/protobuf"), Example: code("http/protobuf"), ReadBy: []string{"serve"}},
		{Name: "OTEL_TRACES_EXPORTER", Meaning: "`otlp`, or `none` to turn tracing off; anything else stops `serve` at start",
			Default: code("otlp"), Example: code("none"), ReadBy: []string{"serve"}},
		{Name: "OTEL_SDK_DISABLED", Meaning: "`true` turns tracing off whatever else is set",
			Default: code("false"), Example: code("true"), ReadBy: []string{"serve"}},
		{Name: "OTEL_SERVICE_NAME", Meaning: "the spans' `service.name`",
			Default: code(tracing.DefaultServiceName), Example: code("paygate-eu"), ReadBy: []string{"serve"}, SDK: true},
		{Name: "OTEL_RESOURCE_ATTRIBUTES", Meaning: "more resource attributes, `key=value` comma-separated",
			Default: "none", Example: code("deployment.environment=production,service.version=1.4.0"), ReadBy: []string{"serve"}, SDK: true},
		{Name: "OTEL_TRACES_SAMPLER", Meaning: "the sampler: `parentbased_traceidratio` with `OTEL_TRACES_SAMPLER_ARG` keeps a share of the traces",
			Default: code("parentbased_always_on"), Example: code("parentbased_traceidratio"), ReadBy: []string{"serve"}, SDK: true},
		{Name: "OTEL_TRACES_SAMPLER_ARG", Meaning: "the sampler's argument: the share of traces kept, `0` to `1`",
			Default: code("1.0"), Example: code("0.1"), ReadBy: []string{"serve"}, SDK: true},
		{Name: "OTEL_EXPORTER_OTLP_HEADERS", Meaning: "headers sent with every export, `key=value` comma-separated (a collector's API key)",
			Default: "none", Example: code("x-honeycomb-team=…"), ReadBy: []string{"serve"}, SDK: true},
		{Name: "OTEL_EXPORTER_OTLP_TIMEOUT", Meaning: "how long one export may take, in milliseconds",
			Default: code("10000"), Example: code("5000"), ReadBy: []string{"serve"}, SDK: true},
		{Name: "OTEL_EXPORTER_OTLP_COMPRESSION", Meaning: "`gzip` compresses exports",
			Default: "none", Example: code("gzip"), ReadBy: []string{"serve"}, SDK: true},
	}},
}

// defaultOIDCScopes is PAYGATE_OIDC_SCOPES's default.
const defaultOIDCScopes = "email,profile"

func code(s string) string { return "`" + s + "`" }

// shortDuration writes d as the variables take it: 10m, 120h, 15s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func days(d time.Duration) string { return fmt.Sprintf("%dd", d/(24*time.Hour)) }

func durations(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = shortDuration(d)
	}
	return strings.Join(out, ",")
}

// configMarkdown is the reference's tables, as docs/configuration.md
// holds them.
func configMarkdown(groups []configGroup) string {
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "### %s\n\n| variable | meaning | default | example | read by |\n|---|---|---|---|---|\n", g.Title)
		for _, v := range g.Vars {
			readBy := make([]string, len(v.ReadBy))
			for j, c := range v.ReadBy {
				readBy[j] = code(c)
			}
			by := strings.Join(readBy, ", ")
			if v.SDK {
				by += " (the OpenTelemetry SDK)"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", code(v.Name), cell(v.Meaning), cell(v.Default), cell(v.Example), by)
		}
	}
	return b.String()
}

// cell escapes what would end a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

var (
	mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	mdCode = strings.NewReplacer("`", "", "**", "")
)

// plain is Markdown as a terminal shows it: links as their text, no
// backticks.
func plain(s string) string { return mdCode.Replace(mdLink.ReplaceAllString(s, "$1")) }

// configText is the reference as `paygate config` prints it.
func configText(groups []configGroup) string {
	var b strings.Builder
	b.WriteString("paygate reads these environment variables (docs/configuration.md says more);\n" +
		"every command checks all of them at start, and acts on those it is read by.\n")
	for _, g := range groups {
		fmt.Fprintf(&b, "\n%s\n", g.Title)
		for _, v := range g.Vars {
			by := strings.Join(v.ReadBy, ", ")
			if v.SDK {
				by += "; read by the OpenTelemetry SDK"
			}
			fmt.Fprintf(&b, "\n  %s  (%s)\n", v.Name, by)
			wrap(&b, plain(v.Meaning), "      ", 78)
			fmt.Fprintf(&b, "      default: %s\n      example: %s\n", plain(v.Default), plain(v.Example))
		}
	}
	return b.String()
}

// wrap writes text in lines of at most width columns, each indented.
func wrap(w io.Writer, text, indent string, width int) {
	line := indent
	for _, word := range strings.Fields(text) {
		if line != indent && len(line)+1+len(word) > width {
			fmt.Fprintln(w, line)
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	if line != indent {
		fmt.Fprintln(w, line)
	}
}

const configUsage = `usage: paygate config [--markdown]
  prints every environment variable paygate reads: its meaning, default,
  an example and the commands that act on it (--markdown: the tables of
  docs/configuration.md)
`

// cmdConfig prints the reference; it reads no configuration, so it works
// whatever the environment holds.
func cmdConfig(args []string, stdout io.Writer) error {
	switch {
	case len(args) == 0:
		fmt.Fprint(stdout, configText(configVars))
	case len(args) == 1 && args[0] == "--markdown":
		fmt.Fprint(stdout, configMarkdown(configVars))
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		fmt.Fprint(stdout, configUsage)
	default:
		return usageError{fmt.Sprintf("config: unexpected argument %q\n\n%s", args[0], configUsage)}
	}
	return nil
}

// wantsHelp reports whether a command's arguments ask for its help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			return true
		}
	}
	return false
}
