// Command paygate is the payment-webhook gateway: `paygate migrate`,
// `paygate serve`, `paygate reconcile --date YYYY-MM-DD`. It only wires the
// packages together from environment configuration; it holds no business
// logic.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/migrations"
	"github.com/paygate/paygate/provider/stripe"
)

const usage = `paygate: payment-webhook gateway with an append-only ledger

usage:
  paygate migrate                      apply the database migrations (safe to repeat)
  paygate serve                        run the HTTP server and the job workers
  paygate reconcile --date YYYY-MM-DD  reconcile one UTC day and print its summary
  paygate reconcile --batch N          reconcile Adyen settlement batch N again from its stored report
  paygate sweep --since T [--until T]  ingest the Stripe events created in that window (RFC 3339, within 30 days)
                                       whose webhooks never arrived, and print what it found
  paygate poison list|show ID|replay ID|discard ID --reason R
                                       review the poison queue from the box
  paygate refund PAYMENT_ID [--amount A] [--reason R] [--note N]
                                       refund a payment, and follow the request
  paygate stripe-events                the Stripe event types to subscribe an endpoint to
  paygate config [--markdown]          every environment variable paygate reads: meaning, default, example
  paygate doctor                       check the configuration, the database, the providers' keys, and
                                       whether an acknowledged event survives losing the primary
  paygate ledger snapshots|close YYYY-MM|export --from D --to D
                                       finance's books: the balance snapshot, closing a month,
                                       the journal export (paygate ledger help)
  paygate demo [--date YYYY-MM-DD]     send a day of a shop's payments to a running paygate (make run),
                                       refund, reconcile, and print what to open in the console
  paygate demo serve                   the demo shop's Stripe, Adyen and endpoint (make run starts it)

Configuration is read from the environment: paygate config lists it, docs/configuration.md explains it.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(os.Stderr, "paygate: %v\n\n%s", err, usage)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "paygate: %v\n", err)
		os.Exit(1)
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"missing command"}
	}
	if args[0] == "doctor" { // it reports a configuration error rather than stopping at it
		return cmdDoctor(ctx, getenv, args[1:], stdout)
	}
	if args[0] == "config" { // the reference, whatever the environment holds
		return cmdConfig(args[1:], stdout)
	}
	if args[0] == "serve" && wantsHelp(args[1:]) {
		return cmdConfig(nil, stdout)
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	switch args[0] {
	case "migrate":
		return cmdMigrate(ctx, cfg, logger, stdout)
	case "serve":
		return cmdServe(ctx, cfg, logger)
	case "sweep":
		return cmdSweep(ctx, cfg, logger, args[1:], stdout)
	case "reconcile":
		return cmdReconcile(ctx, cfg, logger, args[1:], stdout)
	case "poison":
		return cmdPoison(ctx, cfg, logger, args[1:], stdout)
	case "refund":
		return cmdRefund(ctx, cfg, logger, args[1:], stdout)
	case "ledger":
		return cmdLedger(ctx, cfg, logger, args[1:], stdout)
	case "demo":
		return cmdDemo(ctx, cfg, logger, args[1:], stdout)
	case "stripe-events":
		// The types the Stripe mapping uses, comma-separated, as `stripe
		// listen --events` and the Dashboard's endpoint form take them.
		fmt.Fprintln(stdout, strings.Join(stripe.EventTypes, ","))
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
}

func openPool(ctx context.Context, cfg config, maxConns int32, tracer ...pgx.QueryTracer) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	// The URL's own pool_max_conns wins over the command's default, so
	// that several instances can share the server's max_connections.
	if maxConns > 0 && !strings.Contains(cfg.DatabaseURL, "pool_max_conns") {
		pc.MaxConns = maxConns
	}
	pc.ConnConfig.ConnectTimeout = 3 * time.Second
	// A statement that runs this long is a fault, not work: fail it so a
	// provider gets its 503 and retries, instead of a hung request.
	pc.ConnConfig.RuntimeParams["statement_timeout"] = "60000"
	pc.ConnConfig.RuntimeParams["application_name"] = "paygate"
	pc.ConnConfig.OnPgError = dropReadOnly
	for _, t := range tracer {
		pc.ConnConfig.Tracer = t
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	return pool, nil
}

// readOnlySQLTransaction is the SQLSTATE of a write, SELECT FOR UPDATE or
// LISTEN sent to a server that takes no writes (a standby, or a primary
// fenced with default_transaction_read_only).
const readOnlySQLTransaction = "25006"

// dropReadOnly closes a connection that answered an error the server
// meant it to die of (FATAL, as pgx does by default) and one that landed
// on a read-only server (SQLSTATE 25006): after a failover the old
// primary, fenced or come back as a standby, keeps the connections opened
// to it, and pgx would return them to the pool to fail every write again.
// A new connection walks DATABASE_URL's hosts for the read-write one.
func dropReadOnly(_ *pgconn.PgConn, e *pgconn.PgError) bool {
	return !strings.EqualFold(e.Severity, "FATAL") && e.Code != readOnlySQLTransaction
}

// openMigratedPool is openPool for the commands that need the schema: it
// refuses, with the fix in the message, a database `paygate migrate` has not
// brought up to date.
func openMigratedPool(ctx context.Context, cfg config, maxConns int32, tracer ...pgx.QueryTracer) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, cfg, maxConns, tracer...)
	if err != nil {
		return nil, err
	}
	migrated, err := migrations.Applied(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("check migrations (is the database up?): %w", err)
	}
	if !migrated {
		pool.Close()
		return nil, errors.New("the database is not migrated: run `paygate migrate` first")
	}
	return pool, nil
}

func cmdMigrate(ctx context.Context, cfg config, logger *slog.Logger, stdout io.Writer) error {
	pool, err := openPool(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Migrate(ctx, pool, logger); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "migrated to %s\n", migrations.Latest())
	return nil
}
