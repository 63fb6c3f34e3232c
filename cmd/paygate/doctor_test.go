package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/migrations"
)

// doctorBundle is a configuration doctor is run with: a migrated database,
// Stripe's and Adyen's simulated APIs, and the secrets that must never
// appear in its output.
type doctorBundle struct {
	t      *testing.T
	dbURL  string
	env    map[string]string
	stripe *stripesim.Sim
	adyen  *adyensim.Sim
}

const doctorAdyenKey = "AQE-doctor-adyen-api-key-value"

func doctorSetup(t *testing.T) *doctorBundle {
	t.Helper()
	_, dbURL := testdb.NewWithURL(t)
	out, err := runCommand(t, dbURL, "migrate")
	require.NoError(t, err, out)
	st := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	stripeAPI := httptest.NewServer(st.Handler())
	t.Cleanup(stripeAPI.Close)
	ad := adyensim.New(adyensim.Config{APIKey: doctorAdyenKey})
	checkout := ad.StartCheckout(t)
	return &doctorBundle{t: t, dbURL: dbURL, stripe: st, adyen: ad, env: map[string]string{
		"DATABASE_URL":                   asAppRole(t, dbURL),
		"PAYGATE_STRIPE_WEBHOOK_SECRETS": testSecret,
		"PAYGATE_STRIPE_API_KEY":         st.APIKey(),
		"PAYGATE_STRIPE_API_URL":         stripeAPI.URL,
		"PAYGATE_ADYEN_HMAC_KEYS":        ad.HMACKeyHex(),
		"PAYGATE_ADYEN_BASIC_AUTH":       "adyen:doctor-basic-password",
		"PAYGATE_ADYEN_API_KEY":          doctorAdyenKey,
		"PAYGATE_ADYEN_MERCHANT_ACCOUNT": ad.MerchantAccount(),
		"PAYGATE_ADYEN_CHECKOUT_URL":     checkout.URL + adyensim.CheckoutPath,
		"PAYGATE_OPS_TOKENS":             testOps,
		"PAYGATE_SMTP_URL":               "smtp://127.0.0.1:1025",
		"PAYGATE_OPS_EMAIL":              "ops@example.com",
	}}
}

// doctorLine is one printed check.
type doctorLine struct{ verdict, check, text string }

var doctorLineRE = regexp.MustCompile(`^(ok|warn|fail)\s+(\S+(?: api)?)\s+(.*)$`)

// run runs doctor in process with the bundle's environment changed by
// set ("" removes a variable), and returns its lines and whether it
// failed.
func (b *doctorBundle) run(set map[string]string) ([]doctorLine, string, error) {
	b.t.Helper()
	env := map[string]string{}
	for k, v := range b.env {
		env[k] = v
	}
	for k, v := range set {
		env[k] = v
	}
	var out bytes.Buffer
	err := cmdDoctor(context.Background(), func(k string) string { return env[k] }, nil, &out)
	if err != nil {
		require.ErrorIs(b.t, err, errDoctorFailed)
	}
	text := out.String()
	for _, secret := range []string{testSecret, b.stripe.APIKey(), doctorAdyenKey, "doctor-basic-password", testOps} {
		require.NotContains(b.t, text, secret, "doctor prints no secret")
	}
	var lines []doctorLine
	for _, l := range strings.Split(text, "\n") {
		if m := doctorLineRE.FindStringSubmatch(l); m != nil {
			lines = append(lines, doctorLine{m[1], m[2], m[3]})
		}
	}
	return lines, text, err
}

func find(lines []doctorLine, check string) []doctorLine {
	var out []doctorLine
	for _, l := range lines {
		if l.check == check {
			out = append(out, l)
		}
	}
	return out
}

func requireLine(t *testing.T, lines []doctorLine, text, verdict, check, says string) {
	t.Helper()
	for _, l := range find(lines, check) {
		if l.verdict == verdict && strings.Contains(l.text, says) {
			return
		}
	}
	t.Fatalf("no %q line for %s saying %q in:\n%s", verdict, check, says, text)
}

// TestDoctorHealthy: the least-privileged role on a migrated database,
// keys both providers accept: nothing fails, and the one warning is the
// test server's lack of a synchronous standby, with what brings lost
// events back.
func TestDoctorHealthy(t *testing.T) {
	t.Parallel()
	b := doctorSetup(t)
	lines, text, err := b.run(nil)
	require.NoError(t, err, text)
	requireLine(t, lines, text, "ok", "configuration", "read from the environment")
	requireLine(t, lines, text, "ok", "webhooks", "Stripe, Adyen")
	requireLine(t, lines, text, "ok", "database", "PostgreSQL")
	requireLine(t, lines, text, "ok", "role", "connected as paygate_app, the least-privileged role")
	requireLine(t, lines, text, "ok", "migrations", migrations.Latest())
	requireLine(t, lines, text, "ok", "river", "River's migrations applied")
	requireLine(t, lines, text, "warn", "failover", "an acknowledged event does not survive losing the primary")
	requireLine(t, lines, text, "warn", "failover", "the missed-event sweep brings back Stripe events")
	requireLine(t, lines, text, "ok", "stripe api", "Stripe accepted PAYGATE_STRIPE_API_KEY (a test-mode key)")
	requireLine(t, lines, text, "ok", "adyen api", "Adyen accepted PAYGATE_ADYEN_API_KEY")
	for _, l := range lines {
		if l.verdict == "warn" {
			require.Equal(t, "failover", l.check, "the only warning:\n%s", text)
		}
	}
	require.Contains(t, text, "\n0 failed, 1 to look at\n")
}

// TestDoctorFindsWhatIsWrong: each mistake gives its fail or warn line,
// with what to do, and a fail makes doctor fail.
func TestDoctorFindsWhatIsWrong(t *testing.T) {
	t.Parallel()
	b := doctorSetup(t)
	cases := []struct {
		name           string
		set            map[string]string
		fails          bool
		verdict, check string
		says           string
	}{
		{"wrong Stripe key", map[string]string{"PAYGATE_STRIPE_API_KEY": "sk_test_not_the_right_key"}, true,
			"fail", "stripe api", "Stripe refused PAYGATE_STRIPE_API_KEY (a test-mode key, 401)"},
		{"publishable Stripe key", map[string]string{"PAYGATE_STRIPE_API_KEY": "pk_test_publishable"}, true,
			"fail", "stripe api", "publishable key"},
		{"no Stripe key", map[string]string{"PAYGATE_STRIPE_API_KEY": ""}, false,
			"warn", "stripe api", "missed-event sweep are off"},
		{"no Stripe key: nothing brings lost events back", map[string]string{"PAYGATE_STRIPE_API_KEY": ""}, false,
			"warn", "failover", "nothing brings back an acknowledged event lost with the primary"},
		{"Stripe unreachable", map[string]string{"PAYGATE_STRIPE_API_URL": "http://" + freeport.Addr(t)}, true,
			"fail", "stripe api", "did not answer"},
		{"wrong Adyen key", map[string]string{"PAYGATE_ADYEN_API_KEY": "AQE-wrong"}, true,
			"fail", "adyen api", "Adyen refused PAYGATE_ADYEN_API_KEY (401)"},
		{"wrong Adyen merchant account", map[string]string{"PAYGATE_ADYEN_MERCHANT_ACCOUNT": "SomeoneElsesAccount"}, true,
			"fail", "adyen api", "merchant account SomeoneElsesAccount (403 901 Invalid Merchant Account)"},
		{"no webhook secret", map[string]string{"PAYGATE_STRIPE_WEBHOOK_SECRETS": "", "PAYGATE_ADYEN_HMAC_KEYS": "",
			"PAYGATE_ADYEN_BASIC_AUTH": "", "PAYGATE_ADYEN_API_KEY": "", "PAYGATE_ADYEN_MERCHANT_ACCOUNT": ""}, true,
			"fail", "webhooks", "every webhook is answered 503"},
		{"a superuser", map[string]string{"DATABASE_URL": b.dbURL}, false,
			"warn", "role", "a superuser: serve could switch the ledger's append-only guards off"},
		{"a bad setting", map[string]string{"PAYGATE_MAX_BODY_BYTES": "12"}, true,
			"fail", "configuration", "PAYGATE_MAX_BODY_BYTES"},
		{"a bad setting: the database is still checked", map[string]string{"PAYGATE_MAX_BODY_BYTES": "12"}, true,
			"ok", "role", "paygate_app"},
		{"no database there", map[string]string{"DATABASE_URL": "postgres://paygate_app:db-password-value@" + freeport.Addr(t) + "/paygate?sslmode=disable"}, true,
			"fail", "database", "cannot connect to 127.0.0.1:"},
		{"a standby named without target_session_attrs", map[string]string{"DATABASE_URL": twoHosts(t, b.env["DATABASE_URL"], "")}, false,
			"warn", "database", "lists 2 hosts without target_session_attrs=read-write"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lines, text, err := b.run(tc.set)
			require.Equal(t, tc.fails, err != nil, text)
			requireLine(t, lines, text, tc.verdict, tc.check, tc.says)
			require.NotContains(t, text, "db-password-value")
		})
	}

	// The second host, with target_session_attrs, is skipped while the
	// first takes writes: no warning about it.
	lines, text, err := b.run(map[string]string{"DATABASE_URL": twoHosts(t, b.env["DATABASE_URL"], "read-write")})
	require.NoError(t, err, text)
	requireLine(t, lines, text, "ok", "database", "the one of 2 hosts that takes writes")
}

// twoHosts adds a second host (nothing listens there) after dbURL's, with
// target_session_attrs when attrs is not empty.
func twoHosts(t *testing.T, dbURL, attrs string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Host += "," + freeport.Addr(t)
	if attrs != "" {
		q := u.Query()
		q.Set("target_session_attrs", attrs)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// TestDoctorUnmigrated: a database `paygate migrate` never saw fails both
// migration checks, each saying to run it; the binary exits 1.
func TestDoctorUnmigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testdb.ServerURL())
	require.NoError(t, err)
	name := fmt.Sprintf("paygate_doctor_empty_%d", os.Getpid())
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), testdb.ServerURL())
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = conn.Close(context.Background())
		}
	})
	u, err := url.Parse(testdb.ServerURL())
	require.NoError(t, err)
	u.Path = "/" + name
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()

	cmd := exec.Command(paygateBinary(t), "doctor")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + u.String(), "PAYGATE_STRIPE_WEBHOOK_SECRETS=" + testSecret}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "doctor fails: %v\n%s", err, out)
	require.Equal(t, 1, exit.ExitCode(), string(out))
	var lines []doctorLine
	for _, l := range strings.Split(string(out), "\n") {
		if m := doctorLineRE.FindStringSubmatch(l); m != nil {
			lines = append(lines, doctorLine{m[1], m[2], m[3]})
		}
	}
	requireLine(t, lines, string(out), "fail", "migrations", "no paygate table: run `paygate migrate`")
	requireLine(t, lines, string(out), "fail", "river", "run `paygate migrate`")
	require.Contains(t, string(out), "paygate: doctor: a check failed")
}
