package reliability

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/internal/freeport"
)

// StandbyName is the standby's application_name, the name
// synchronous_standby_names gives it.
const StandbyName = "paygate_standby"

// Pair is a private primary and a standby streaming from it (physical
// replication, hot standby), each its own cluster on a free loopback port:
// a failover can be played on it by crashing the primary and promoting the
// standby.
type Pair struct {
	Primary, Standby *Cluster
}

// PairOpts configures StartPair.
type PairOpts struct {
	// Synchronous makes the standby synchronous: the primary's
	// synchronous_standby_names names it (synchronous_commit stays on).
	// The setting is the primary's own (ALTER SYSTEM after the base
	// backup), so a promoted standby does not inherit it and takes writes
	// at once, as a failover manager that drops the lost node from the
	// list leaves it.
	Synchronous bool
}

// StartPair starts a primary (StartCluster), takes a base backup of it into
// a second private cluster with pg_basebackup -R, starts that as a standby,
// and waits until it streams (synchronously with opts.Synchronous). Both are
// stopped and removed at cleanup.
//
// It fails with ErrNoPostgresTools when the server binaries are missing.
func StartPair(t testing.TB, opts PairOpts) (*Pair, error) {
	t.Helper()
	SweepClusters() // a killed test binary of another package runs no cleanup
	primary, err := StartCluster(t)
	if err != nil {
		return nil, err
	}
	standby, err := newCluster(t, primary.bin, "private standby", "pg_basebackup")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// -R writes standby.signal and primary_conninfo, which keeps the
	// connection's application_name: the standby's name.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port, StandbyName)
	if out, err := standby.pg(ctx, "pg_basebackup", "-d", conninfo, "-D", standby.data(), "-X", "stream", "-R", "-c", "fast").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %v\n%s", err, out)
	}
	if standby.Port, err = freeport.Port(); err != nil {
		return nil, err
	}
	if err := standby.Start(); err != nil {
		return nil, err
	}
	p := &Pair{Primary: primary, Standby: standby}
	want := "async"
	if opts.Synchronous {
		want = "sync"
		if err := p.exec(ctx, primary, fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '%s'`, StandbyName)); err != nil {
			return nil, err
		}
		if err := p.exec(ctx, primary, `SELECT pg_reload_conf()`); err != nil {
			return nil, err
		}
	}
	if err := p.waitStreaming(ctx, want); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pair) exec(ctx context.Context, c *Cluster, sql string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to %d: %w", c.Port, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// waitStreaming waits until the primary shows the standby streaming with
// sync_state want.
func (p *Pair) waitStreaming(ctx context.Context, want string) error {
	conn, err := pgx.Connect(ctx, p.Primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the primary: %w", err)
	}
	defer conn.Close(ctx)
	var state, sync string
	for {
		err := conn.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`, StandbyName).Scan(&state, &sync)
		if err == nil && state == "streaming" && sync == want {
			return nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the standby is not streaming %s (state %q, sync_state %q): %w\n%s", want, state, sync, ctx.Err(), p.Standby.ServerLog())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is database db's URL naming both servers, the primary first, with
// target_session_attrs=read-write: whichever takes writes.
func (p *Pair) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write",
		p.Primary.Port, p.Standby.Port, db)
}

// StopReceiver stops the standby's WAL receiver (its primary_conninfo
// emptied, the configuration reloaded) and waits until it is gone: from
// then on the primary's commits do not reach the standby, as when a
// network cut or a lagging standby holds them back.
func (p *Pair) StopReceiver(ctx context.Context) error {
	if err := p.exec(ctx, p.Standby, `ALTER SYSTEM SET primary_conninfo = ''`); err != nil {
		return err
	}
	if err := p.exec(ctx, p.Standby, `SELECT pg_reload_conf()`); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, p.Standby.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the standby: %w", err)
	}
	defer conn.Close(ctx)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_wal_receiver`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the standby's WAL receiver did not stop: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Crash stops the primary as a crash would (pg_ctl -m immediate): its
// connections are cut, nothing is flushed or handed over.
func (p *Pair) Crash() error { return p.Primary.Stop("immediate") }

// Promote promotes the standby (pg_ctl promote, waiting until it takes
// writes).
func (p *Pair) Promote(ctx context.Context) error {
	out, err := p.Standby.pg(ctx, "pg_ctl", "-D", p.Standby.data(), "-w", "-t", "50", "promote").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl promote: %v\n%s", err, out)
	}
	return nil
}
