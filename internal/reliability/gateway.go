package reliability

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/outbuf"
)

// Secrets and tokens the harness configures its gateways with. They are
// test values, and the log scan looks for each of them.
const (
	WebhookSecret = "whsec_reliability_current_secret"
	OldSecret     = "whsec_reliability_rotated_out"
	OpsToken      = "reliability-ops-token-value"
	FinanceToken  = "reliability-finance-token-value"
)

var (
	buildMu  sync.Mutex
	builtBin string
	buildDir string
)

// Binary returns the path of a `paygate` binary: $PAYGATE_BINARY when set,
// else one built once per test process from this module's cmd/paygate.
// RemoveBuild deletes it.
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv("PAYGATE_BINARY"); p != "" {
		return p, nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtBin != "" {
		return builtBin, nil
	}
	dir, err := os.MkdirTemp("", "paygate-reliability-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "paygate")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/paygate/paygate/cmd/paygate")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("go build ./cmd/paygate: %v\n%s", err, out)
	}
	buildDir, builtBin = dir, bin
	return bin, nil
}

// RemoveBuild deletes the binary Binary built, if any.
func RemoveBuild() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
		buildDir, builtBin = "", ""
	}
}

// Migrate runs `paygate migrate` against dbURL.
func Migrate(ctx context.Context, bin, dbURL string) error {
	cmd := exec.CommandContext(ctx, bin, "migrate")
	cmd.Env = append(baseEnv(), "DATABASE_URL="+dbURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("paygate migrate: %v\n%s", err, out)
	}
	return nil
}

// baseEnv is the test process's environment without any paygate setting,
// so a developer's DATABASE_URL or tokens never leak into a gateway.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PAYGATE_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Logs collects the output of every gateway process of a run, for the
// secret scan at the end.
type Logs = outbuf.Buffer

// GatewayConfig configures one gateway instance.
type GatewayConfig struct {
	Binary      string
	DatabaseURL string
	Addr        string   // loopback host:port, kept across restarts; a free port when empty
	Env         []string // extra KEY=value settings
	Logs        *Logs    // every generation's stdout and stderr
}

// Gateway is one `paygate serve` instance that can be killed and restarted
// on the same address.
type Gateway struct {
	cfg GatewayConfig

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	starts  []time.Time
	kills   int
	running bool
}

// NewGateway prepares an instance; Start runs it.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if cfg.Addr == "" {
		port, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		cfg.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	if !strings.HasPrefix(cfg.Addr, "127.0.0.1:") {
		return nil, fmt.Errorf("gateway address %q is not loopback", cfg.Addr)
	}
	if cfg.Logs == nil {
		cfg.Logs = &Logs{}
	}
	return &Gateway{cfg: cfg}, nil
}

// Addr is the instance's listen address.
func (g *Gateway) Addr() string { return g.cfg.Addr }

// URL is the base URL of the instance.
func (g *Gateway) URL() string { return "http://" + g.cfg.Addr }

// WebhookURL is the instance's Stripe webhook endpoint.
func (g *Gateway) WebhookURL() string { return g.URL() + "/webhooks/stripe" }

// Start runs a new process and waits (up to 30s) until it answers /readyz.
// The process dies with the test binary (Pdeathsig) should cleanup not run.
func (g *Gateway) Start(ctx context.Context) error {
	g.mu.Lock()
	if g.running {
		g.mu.Unlock()
		return errors.New("gateway already running")
	}
	cmd := exec.Command(g.cfg.Binary, "serve")
	cmd.Env = append(baseEnv(),
		"DATABASE_URL="+g.cfg.DatabaseURL,
		"PAYGATE_ADDR="+g.cfg.Addr,
		"PAYGATE_STRIPE_WEBHOOK_SECRETS="+OldSecret+","+WebhookSecret,
		"PAYGATE_OPS_TOKENS="+OpsToken,
		"PAYGATE_FINANCE_TOKENS="+FinanceToken,
	)
	cmd.Env = append(cmd.Env, g.cfg.Env...)
	cmd.Stdout, cmd.Stderr = g.cfg.Logs, g.cfg.Logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		g.mu.Unlock()
		return fmt.Errorf("start paygate serve: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	g.cmd, g.done, g.running = cmd, done, true
	g.starts = append(g.starts, time.Now())
	g.mu.Unlock()
	return g.waitReady(ctx, done)
}

func (g *Gateway) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL()+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			g.mu.Lock()
			g.running = false
			g.mu.Unlock()
			return fmt.Errorf("paygate serve on %s exited before it was ready", g.cfg.Addr)
		case <-ctx.Done():
			return fmt.Errorf("paygate serve on %s not ready: %w", g.cfg.Addr, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL and waits for the process to be gone: no shutdown
// hook runs, in-flight requests and jobs are cut wherever they are.
func (g *Gateway) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		return nil
	}
	if err := g.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill paygate: %w", err)
	}
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		return errors.New("paygate did not die within 10s of SIGKILL")
	}
	g.running = false
	g.kills++
	return nil
}

// Pause freezes the process (SIGSTOP): it holds its connections and its
// jobs, and does nothing, as a process stuck in a long pause does; River
// rescues its jobs once they are stuck long enough. Resume lets it go on.
func (g *Gateway) Pause() error { return g.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (g *Gateway) Resume() error { return g.signal(syscall.SIGCONT) }

func (g *Gateway) signal(sig syscall.Signal) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		return errors.New("gateway not running")
	}
	if err := g.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal paygate %s: %w", sig, err)
	}
	return nil
}

// Stop sends SIGTERM and waits up to 30s for a clean exit, then kills.
func (g *Gateway) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	g.running = false
}

// Running reports whether a process is up.
// A process that exited on its own is not running.
func (g *Gateway) Running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.running {
		return false
	}
	select {
	case <-g.done:
		return false
	default:
		return true
	}
}

// Kills is how many times Kill killed a process.
func (g *Gateway) Kills() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.kills
}

// LastStart is when the latest process was started.
func (g *Gateway) LastStart() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.starts) == 0 {
		return time.Time{}
	}
	return g.starts[len(g.starts)-1]
}
