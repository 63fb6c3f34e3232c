package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/internal/freeport"
)

// ErrNoPostgresTools is returned when initdb or pg_ctl cannot be found.
var ErrNoPostgresTools = errors.New("initdb/pg_ctl not found (install PostgreSQL's server package)")

// clusterPrefix names the temporary directories of private clusters, so a
// later run can find and stop clusters a killed test binary left behind.
const clusterPrefix = "paygate-reliability-pg-"

// Cluster is a private PostgreSQL cluster in a temporary directory, on a free
// loopback port, owned by this test process: it may be stopped, restarted and
// have its connections dropped without touching anyone else's server.
type Cluster struct {
	Root string // temporary directory: data/, server.log, the socket, owner.pid
	Port int
	bin  string // directory of initdb and pg_ctl
}

// StartCluster creates and starts a private cluster; it is stopped with
// pg_ctl and removed at cleanup. Running as root, the server runs as the
// postgres user (initdb refuses root).
//
// It fails with ErrNoPostgresTools when the server binaries are missing.
func StartCluster(t testing.TB) (*Cluster, error) {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	c, err := newCluster(t, bin, "private cluster", "initdb")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.pg(ctx, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "-N").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if c.Port, err = freeport.Port(); err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) data() string { return filepath.Join(c.Root, "data") }

// pg runs one of the server binaries, as postgres when we are root.
func (c *Cluster) pg(ctx context.Context, tool string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, tool)
	if os.Geteuid() == 0 {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.CommandContext(ctx, path, args...)
}

// Start starts the (stopped) cluster on its port and waits until it accepts
// connections.
func (c *Cluster) Start() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c max_connections=300 -c shared_buffers=64MB", c.Port, c.Root)
	out, err := c.pg(ctx, "pg_ctl", "-D", c.data(), "-w", "-t", "50", "-l", filepath.Join(c.Root, "server.log"), "-o", opts, "start").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	return nil
}

// Stop stops the cluster: mode "fast" (clients are disconnected, a clean
// shutdown) or "immediate" (a crash: recovery replays the WAL on start).
// Stopping a stopped cluster is not an error.
func (c *Cluster) Stop(mode string) error {
	if _, err := os.Stat(filepath.Join(c.data(), "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.pg(ctx, "pg_ctl", "-D", c.data(), "-w", "-t", "50", "-m", mode, "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// URL is the URL of database db on the cluster.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// CreateDatabase creates database name on the cluster.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to private cluster: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// ServerLog returns the cluster's server log.
func (c *Cluster) ServerLog() string {
	b, _ := os.ReadFile(filepath.Join(c.Root, "server.log"))
	return string(b)
}

// TerminateBackends drops every connection whose application_name is
// appName on the server at adminURL, as a failing network or an operator's
// pg_terminate_backend would, and returns how many it dropped.
func TerminateBackends(ctx context.Context, adminURL, appName string) (int, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, appName).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("terminate backends: %w", err)
	}
	return n, nil
}

// SweepClusters stops and removes private clusters whose test process is
// gone (a test binary killed by its timeout runs no cleanup). It returns how
// many it swept.
func SweepClusters() int {
	bin, err := pgBinDir()
	if err != nil {
		return 0
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), clusterPrefix+"*"))
	swept := 0
	for _, root := range dirs {
		b, err := os.ReadFile(filepath.Join(root, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue // still running (or unreadable): not ours to touch
		}
		c := &Cluster{Root: root, bin: bin}
		_ = c.Stop("immediate")
		os.RemoveAll(root)
		swept++
	}
	return swept
}

func pgBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				return filepath.Dir(real), nil
			}
			return filepath.Dir(p), nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	for i := len(matches) - 1; i >= 0; i-- {
		dir := filepath.Dir(matches[i])
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", ErrNoPostgresTools
}

// newCluster makes the empty root of a cluster run by bin's programs:
// owned by the postgres user when the test runs as root (what, e.g.
// initdb, refuses root), marked with this process's pid for SweepClusters,
// and stopped and removed at the end of t. name says what it is in logs.
func newCluster(t testing.TB, bin, name, what string) (*Cluster, error) {
	root, err := os.MkdirTemp("", clusterPrefix)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Root: root, bin: bin}
	if err := os.WriteFile(filepath.Join(root, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(root)
			return nil, fmt.Errorf("running as root needs a postgres user for %s: %w", what, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(root, uid, gid); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	t.Cleanup(func() {
		if err := c.Stop("fast"); err != nil {
			t.Logf("stop %s: %v", name, err)
			_ = c.Stop("immediate")
		}
		os.RemoveAll(root)
	})
	return c, nil
}
