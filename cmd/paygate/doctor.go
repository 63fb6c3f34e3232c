package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/paygate/paygate/durability"
	"github.com/paygate/paygate/migrations"
)

// errDoctorFailed makes `paygate doctor` exit non-zero: a check failed (each
// failure is already printed with what to do).
var errDoctorFailed = errors.New("doctor: a check failed; see the lines marked fail above")

// providerCallTimeout bounds each of doctor's calls to a provider's API.
const providerCallTimeout = 5 * time.Second

type verdict string

const (
	vOK   verdict = "ok"
	vWarn verdict = "warn"
	vFail verdict = "fail"
)

// doctor collects the checks' verdicts and prints them as they come, in
// columns.
type doctor struct {
	out   io.Writer
	fails int
	warns int
}

func (d *doctor) say(v verdict, what, text string) {
	switch v {
	case vFail:
		d.fails++
	case vWarn:
		d.warns++
	}
	fmt.Fprintf(d.out, "%-4s  %-13s %s\n", v, what, text)
}

// cmdDoctor checks, without changing anything, what `paygate serve` would
// run with: the configuration (read as serve reads it), the database (its
// reachability, whether it takes writes, the role serve logs in as, paygate's
// and River's migrations), what an acknowledged event is worth if the
// primary is lost, and the providers' API keys (one cheap authenticated
// call each). Each check prints ok, warn or fail with what to do; any fail
// makes it exit non-zero. It never prints a secret.
func cmdDoctor(ctx context.Context, getenv func(string) string, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return usageError{"doctor takes no arguments"}
	}
	d := &doctor{out: stdout}
	cfg, cfgErr := loadConfig(getenv)
	if cfgErr != nil {
		d.say(vFail, "configuration", cfgErr.Error()+" (serve refuses to start with it; fix the variable and run doctor again)")
	} else {
		d.say(vOK, "configuration", "read from the environment as serve reads it")
		checkSettings(d, cfg)
	}
	// DATABASE_URL is read first, so it is known even when a later
	// setting is wrong.
	checkDatabase(ctx, d, cfg)
	if cfgErr == nil {
		checkStripeKey(ctx, d, cfg)
		checkAdyenKey(ctx, d, cfg)
	}
	fmt.Fprintf(stdout, "\n%d failed, %d to look at\n", d.fails, d.warns)
	if d.fails > 0 {
		return errDoctorFailed
	}
	return nil
}

// checkSettings looks at settings that start fine but leave part of
// paygate idle.
func checkSettings(d *doctor, cfg config) {
	if len(cfg.StripeSecrets) == 0 && len(cfg.AdyenHMACKeys) == 0 && len(cfg.StandardSources) == 0 {
		d.say(vFail, "webhooks", "no provider's webhook secret is set (PAYGATE_STRIPE_WEBHOOK_SECRETS, PAYGATE_ADYEN_HMAC_KEYS, "+
			"PAYGATE_STANDARD_WEBHOOK_SOURCES): every webhook is answered 503; copy the signing secret from the provider's dashboard")
	} else {
		var on []string
		if len(cfg.StripeSecrets) > 0 {
			on = append(on, "Stripe")
		}
		if len(cfg.AdyenHMACKeys) > 0 {
			on = append(on, "Adyen")
		}
		for _, s := range cfg.StandardSources {
			on = append(on, s.Name)
		}
		d.say(vOK, "webhooks", "signing secrets set for "+strings.Join(on, ", "))
	}
	if len(cfg.AdyenHMACKeys) > 0 && cfg.AdyenBasicAuth == "" {
		d.say(vWarn, "webhooks", "PAYGATE_ADYEN_BASIC_AUTH is empty: an Adyen item's HMAC covers only some of its fields; "+
			"set Basic auth on the webhook in Adyen's Customer Area and the same user:password here")
	}
	if len(cfg.OpsTokens) == 0 {
		d.say(vWarn, "tokens", "PAYGATE_OPS_TOKENS is empty: nobody can use the ops API or the console's ops pages")
	}
	if cfg.SMTPURL == "" {
		d.say(vWarn, "email", "PAYGATE_SMTP_URL is empty: receipts and ops alerts are recorded as skipped, none is sent")
	} else if cfg.OpsEmail == "" {
		d.say(vWarn, "email", "PAYGATE_OPS_EMAIL is empty: alerts (poison events, disabled endpoints) go to nobody")
	}
	if cfg.DeliveryAllowPrivate {
		d.say(vWarn, "delivery", "PAYGATE_DELIVERY_ALLOW_PRIVATE is true: endpoints may use http and private addresses; for development only")
	}
}

// checkDatabase connects as serve does and checks the server, the role and
// the schema; it stops at the first check the others depend on.
func checkDatabase(ctx context.Context, d *doctor, cfg config) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		d.say(vFail, "database", fmt.Sprintf("DATABASE_URL cannot be read: %v; it is a postgres:// URL such as %s",
			err, "postgres://paygate_app@db.internal:5432/paygate?sslmode=verify-full"))
		return
	}
	hosts := distinctHosts(pc)
	if len(hosts) > 1 && pc.ConnConfig.ValidateConnect == nil {
		d.say(vWarn, "database", fmt.Sprintf("DATABASE_URL lists %d hosts without target_session_attrs=read-write: paygate may "+
			"connect to a standby, which takes no writes; add ?target_session_attrs=read-write", len(hosts)))
	}
	pool, err := openPool(ctx, cfg, 2)
	if err != nil {
		d.say(vFail, "database", err.Error())
		return
	}
	defer pool.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pool.Acquire(cctx)
	if err != nil {
		d.say(vFail, "database", fmt.Sprintf("cannot connect to %s (DATABASE_URL): %v. Is PostgreSQL running there, and "+
			"does it take this role? On a development machine scripts/db.sh starts one and prints its URL",
			strings.Join(hosts, ", "), err))
		return
	}
	at := conn.Conn().PgConn().Conn().RemoteAddr().String()
	var version, db string
	var inRecovery bool
	err = conn.QueryRow(cctx, `SELECT current_setting('server_version'), current_database(), pg_is_in_recovery()`).
		Scan(&version, &db, &inRecovery)
	conn.Release()
	if err != nil {
		d.say(vFail, "database", fmt.Sprintf("connected to %s, but a first query failed: %v", at, err))
		return
	}
	if inRecovery {
		d.say(vFail, "database", fmt.Sprintf("connected to %s, a standby (in recovery): it takes no writes. Name the primary "+
			"in DATABASE_URL, or list every host with target_session_attrs=read-write", at))
		return
	}
	where := ""
	if len(hosts) > 1 {
		where = fmt.Sprintf(", the one of %d hosts that takes writes", len(hosts))
	}
	d.say(vOK, "database", fmt.Sprintf("PostgreSQL %s at %s%s, database %s", version, at, where, db))

	checkRole(cctx, d, pool)
	checkMigrations(cctx, d, pool)
	checkFailover(cctx, d, pool, cfg)
}

// distinctHosts lists the host:port pairs of a URL once each (pgx adds a
// fallback per host for sslmode=prefer's second try).
func distinctHosts(pc *pgxpool.Config) []string {
	var out []string
	seen := map[string]bool{}
	add := func(host string, port uint16) {
		hp := net.JoinHostPort(host, fmt.Sprint(port))
		if !seen[hp] {
			seen[hp] = true
			out = append(out, hp)
		}
	}
	add(pc.ConnConfig.Host, pc.ConnConfig.Port)
	for _, f := range pc.ConnConfig.Fallbacks {
		add(f.Host, f.Port)
	}
	return out
}

// checkRole: serve should log in as the least-privileged paygate_app, which
// owns nothing and so can switch no guard of the ledger off.
func checkRole(ctx context.Context, d *doctor, pool *pgxpool.Pool) {
	var role string
	var super bool
	var owned int
	err := pool.QueryRow(ctx, `
		SELECT current_user, r.rolsuper,
		       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		        WHERE c.relowner = r.oid AND n.nspname = current_schema() AND c.relkind IN ('r', 'p'))
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&role, &super, &owned)
	if err != nil {
		d.say(vWarn, "role", fmt.Sprintf("the role's rights could not be read: %v", err))
		return
	}
	advice := fmt.Sprintf("run `paygate migrate` as the owner, and serve as %s: DATABASE_URL=postgres://%s@…/… "+
		"(docs/operations.md, Database roles)", migrations.AppRole, migrations.AppRole)
	switch {
	case super:
		d.say(vWarn, "role", fmt.Sprintf("connected as %s, a superuser: serve could switch the ledger's append-only "+
			"guards off or rewrite it; %s", role, advice))
	case owned > 0:
		d.say(vWarn, "role", fmt.Sprintf("connected as %s, which owns %d of the schema's tables: serve could disable "+
			"their guard triggers; %s", role, owned, advice))
	case role == migrations.AppRole:
		d.say(vOK, "role", fmt.Sprintf("connected as %s, the least-privileged role: it owns no table and cannot "+
			"switch the ledger's guards off", role))
	default:
		d.say(vOK, "role", fmt.Sprintf("connected as %s, which owns no table and is no superuser", role))
	}
}

// checkMigrations checks paygate's and River's migrations.
func checkMigrations(ctx context.Context, d *doctor, pool *pgxpool.Pool) {
	latest := migrations.Latest()
	var exists bool
	var applied *string
	err := pool.QueryRow(ctx, `SELECT to_regclass('paygate_migrations') IS NOT NULL`).Scan(&exists)
	if err == nil && exists {
		err = pool.QueryRow(ctx, `SELECT max(version) FROM paygate_migrations`).Scan(&applied)
	}
	switch {
	case err != nil:
		d.say(vFail, "migrations", fmt.Sprintf("the applied migrations could not be read: %v", err))
	case applied == nil:
		d.say(vFail, "migrations", "the database has no paygate table: run `paygate migrate` as the database's owner")
	case *applied < latest:
		d.say(vFail, "migrations", fmt.Sprintf("the database is migrated up to %s, this paygate needs %s: run `paygate migrate` "+
			"as the database's owner (safe while other instances run)", *applied, latest))
	case *applied > latest:
		d.say(vWarn, "migrations", fmt.Sprintf("the database has migration %s, newer than this paygate knows (%s): "+
			"run the paygate that migrated it", *applied, latest))
	default:
		d.say(vOK, "migrations", fmt.Sprintf("paygate's migrations applied, up to %s", latest))
	}

	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		d.say(vFail, "river", fmt.Sprintf("River's migrator: %v", err))
		return
	}
	res, err := m.Validate(ctx, nil)
	switch {
	case err != nil:
		d.say(vFail, "river", fmt.Sprintf("River's migrations could not be read: %v; run `paygate migrate`", err))
	case !res.OK:
		d.say(vFail, "river", fmt.Sprintf("River's migrations are not all applied (%s): run `paygate migrate`",
			strings.Join(res.Messages, "; ")))
	default:
		all := m.AllVersions()
		d.say(vOK, "river", fmt.Sprintf("River's migrations applied, up to version %d", all[len(all)-1].Version))
	}
}

// durabilityRecovery is what can bring back events a failover lost, from
// the configuration.
func durabilityRecovery(cfg config) durability.Recovery {
	return durability.Recovery{StripeAPIKey: cfg.StripeAPIKey != "", StripeSweepOff: cfg.StripeSweepEvery == 0}
}

// checkFailover says what a 2xx is worth if the primary is lost.
func checkFailover(ctx context.Context, d *doctor, pool *pgxpool.Pool, cfg config) {
	r := durability.Check(ctx, pool, durabilityRecovery(cfg))
	var standbys []string
	for _, s := range r.Server.Standbys {
		if s.Hidden {
			standbys = append(standbys, s.Name+" (state hidden from this role)")
		} else {
			standbys = append(standbys, fmt.Sprintf("%s %s %s", s.Name, s.State, s.SyncState))
		}
	}
	seen := ""
	if len(standbys) > 0 {
		seen = " Standbys: " + strings.Join(standbys, ", ") + "."
	}
	switch {
	case r.CommitsWait:
		d.say(vFail, "failover", "commits wait: "+r.Reason+"."+seen)
	case r.Survives == durability.Yes:
		d.say(vOK, "failover", "an acknowledged event survives losing the primary: "+r.Reason+"."+seen)
	case r.Survives == durability.No:
		d.say(vWarn, "failover", "an acknowledged event does not survive losing the primary: "+r.Reason+"."+seen+
			" Then: "+r.Recovery+".")
	default:
		d.say(vWarn, "failover", "whether an acknowledged event survives losing the primary is unknown: "+r.Reason+"."+seen+
			" Should it not: "+r.Recovery+".")
	}
}

// logDurability says at start what a 2xx is worth, once.
func logDurability(ctx context.Context, pool *pgxpool.Pool, cfg config, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r := durability.Check(ctx, pool, durabilityRecovery(cfg))
	level := slog.LevelInfo
	if r.Survives != durability.Yes || r.CommitsWait {
		level = slog.LevelWarn
	}
	logger.Log(ctx, level, "an acknowledged event survives losing the database's primary: "+string(r.Survives),
		"survives_primary_loss", string(r.Survives), "reason", r.Reason, "commits_wait", r.CommitsWait, "recovery", r.Recovery)
}

// checkStripeKey lists one event with the key: the call the missed-event
// sweep and the reconciliation's recovery make, and a cheap one.
func checkStripeKey(ctx context.Context, d *doctor, cfg config) {
	key := cfg.StripeAPIKey
	if key == "" {
		d.say(vWarn, "stripe api", "PAYGATE_STRIPE_API_KEY is empty: refunds from paygate, the daily reconciliation and the "+
			"missed-event sweep are off for Stripe; set a secret key (sk_…) or a restricted key (rk_…) with Events, "+
			"Balance transactions read and Refunds write")
		return
	}
	if strings.HasPrefix(key, "pk_") {
		d.say(vFail, "stripe api", "PAYGATE_STRIPE_API_KEY is a publishable key (pk_…): paygate needs a secret key (sk_…) "+
			"or a restricted key (rk_…), from the Dashboard's Developers → API keys")
		return
	}
	mode := "a live-mode key"
	if strings.Contains(key, "_test_") {
		mode = "a test-mode key"
	}
	status, _, err := call(ctx, http.MethodGet, cfg.StripeAPIURL+"/v1/events?limit=1", nil,
		http.Header{"Authorization": {"Bearer " + key}})
	switch {
	case err != nil:
		d.say(vFail, "stripe api", fmt.Sprintf("Stripe's API at %s did not answer: %v; check the network (and PAYGATE_STRIPE_API_URL)", cfg.StripeAPIURL, err))
	case status == http.StatusOK:
		d.say(vOK, "stripe api", fmt.Sprintf("Stripe accepted PAYGATE_STRIPE_API_KEY (%s) at %s and lists its events", mode, cfg.StripeAPIURL))
	case status == http.StatusUnauthorized:
		d.say(vFail, "stripe api", fmt.Sprintf("Stripe refused PAYGATE_STRIPE_API_KEY (%s, 401): it is wrong, rolled or "+
			"expired; make a new one in the Dashboard's Developers → API keys", mode))
	case status == http.StatusForbidden:
		d.say(vFail, "stripe api", fmt.Sprintf("PAYGATE_STRIPE_API_KEY (%s) may not list events (403): give the restricted "+
			"key Events read, Balance transactions read and Refunds write", mode))
	case status == http.StatusTooManyRequests:
		d.say(vWarn, "stripe api", "Stripe answered 429 (rate limited): the key was not checked; run doctor again in a minute")
	default:
		d.say(vFail, "stripe api", fmt.Sprintf("Stripe's API at %s answered %d to listing events with PAYGATE_STRIPE_API_KEY (%s)",
			cfg.StripeAPIURL, status, mode))
	}
}

// checkAdyenKey asks Adyen's Checkout API for the merchant account's
// payment methods: authenticated by the key, checked against the merchant
// account, and changing nothing.
func checkAdyenKey(ctx context.Context, d *doctor, cfg config) {
	if cfg.AdyenAPIKey == "" {
		if len(cfg.AdyenHMACKeys) > 0 {
			d.say(vWarn, "adyen api", "PAYGATE_ADYEN_API_KEY is empty: Adyen's webhooks are taken, but refunds of Adyen "+
				"payments cannot be started from paygate; set it with PAYGATE_ADYEN_MERCHANT_ACCOUNT")
		} else {
			d.say(vOK, "adyen api", "Adyen is not configured (no API key, no HMAC key)")
		}
		return
	}
	body, _ := json.Marshal(map[string]string{"merchantAccount": cfg.AdyenMerchantAccount})
	status, answer, err := call(ctx, http.MethodPost, cfg.AdyenCheckoutURL+"/paymentMethods", body,
		http.Header{"X-API-Key": {cfg.AdyenAPIKey}, "Content-Type": {"application/json"}})
	var e struct {
		ErrorCode string `json:"errorCode"`
		Message   string `json:"message"`
	}
	_ = json.Unmarshal(answer, &e)
	switch {
	case err != nil:
		d.say(vFail, "adyen api", fmt.Sprintf("Adyen's Checkout API at %s did not answer: %v; check the network (and PAYGATE_ADYEN_CHECKOUT_URL)", cfg.AdyenCheckoutURL, err))
	case status == http.StatusOK:
		d.say(vOK, "adyen api", fmt.Sprintf("Adyen accepted PAYGATE_ADYEN_API_KEY for merchant account %s at %s", cfg.AdyenMerchantAccount, cfg.AdyenCheckoutURL))
	case status == http.StatusUnauthorized:
		d.say(vFail, "adyen api", "Adyen refused PAYGATE_ADYEN_API_KEY (401): it is wrong or revoked, or belongs to the other "+
			"environment (test keys work only on checkout-test.adyen.com); make one in the Customer Area's Developers → API credentials")
	case status == http.StatusForbidden:
		d.say(vFail, "adyen api", fmt.Sprintf("Adyen refused the key for merchant account %s (403 %s %s): give the API credential "+
			"the Checkout webservice role and access to that account, or fix PAYGATE_ADYEN_MERCHANT_ACCOUNT",
			cfg.AdyenMerchantAccount, e.ErrorCode, e.Message))
	default:
		d.say(vFail, "adyen api", fmt.Sprintf("Adyen's Checkout API at %s answered %d (%s %s)", cfg.AdyenCheckoutURL, status, e.ErrorCode, e.Message))
	}
}

// call makes one request of a provider's API under providerCallTimeout,
// without following redirects, and reads at most 64 KiB of the answer.
func call(ctx context.Context, method, url string, body []byte, h http.Header) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, providerCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header = h
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, answer, nil
}
