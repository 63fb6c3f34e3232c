// Package mailpit runs a real SMTP server for tests: mailpit
// (github.com/axllent/mailpit, pinned by scripts/tools.sh), started on free
// ports, waited for until ready, stopped at the test's cleanup, and read
// through its HTTP API.
//
//	mp := mailpit.Start(t)
//	… send to mp.SMTPURL() …
//	msgs := mp.WaitForMessages(t, 1)
//
// The binary is $MAILPIT_BIN, else ./.tools/bin/mailpit under the module
// root, else mailpit on PATH. When none is there the test fails (it is never
// skipped) and says to run `make test` or scripts/tools.sh. It must never be
// imported by production code.
package mailpit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/outbuf"
)

// Version is the mailpit version scripts/tools.sh installs.
const Version = "v1.33.1"

// Opts adjusts a server. The zero value (or nil) is a plain server on free
// ports with chaos triggers enabled but idle.
type Opts struct {
	// SMTPPort is the SMTP port to listen on; 0 picks a free one. Tests that
	// need "SMTP down, then up" reserve a port, point the sender at it while
	// nothing listens, then start mailpit on it.
	SMTPPort int
	// Args are extra mailpit flags, e.g. "--smtp-allowed-recipients", "^ok@".
	Args []string
}

// Server is a running mailpit.
type Server struct {
	smtpPort, httpPort int
	cmd                *exec.Cmd
	exited             chan struct{}
	log                *outbuf.Buffer
	stopOnce           sync.Once
}

// Start runs a mailpit for t on free ports and stops it at t's cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWithOpts(t, nil)
}

// StartWithOpts is Start with options.
func StartWithOpts(t testing.TB, opts *Opts) *Server {
	t.Helper()
	if opts == nil {
		opts = &Opts{}
	}
	bin, err := Binary()
	if err != nil {
		t.Fatalf("mailpit: %v", err)
	}
	dir := t.TempDir()
	var lastErr error
	// A free port can be taken by someone else between our probe and
	// mailpit's bind; try again with new ports a few times.
	for try := 0; try < 4; try++ {
		smtpPort := opts.SMTPPort
		if smtpPort == 0 {
			smtpPort = freeport.MustPort(t)
		}
		s, err := start(bin, filepath.Join(dir, fmt.Sprintf("mailpit-%d.db", try)), smtpPort, freeport.MustPort(t), opts.Args)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	t.Fatalf("mailpit: %v", lastErr)
	return nil
}

func start(bin, db string, smtpPort, httpPort int, extra []string) (*Server, error) {
	args := []string{
		"--smtp", "127.0.0.1:" + strconv.Itoa(smtpPort),
		"--listen", "127.0.0.1:" + strconv.Itoa(httpPort),
		"--database", db,
		"--disable-version-check",
		"--smtp-disable-rdns", // no DNS in sandboxes; and it slows every connection
		"--enable-chaos",      // so tests can make it answer 4xx/5xx (SetChaos)
		"--max", "0",          // keep every message
	}
	args = append(args, extra...)
	s := &Server{smtpPort: smtpPort, httpPort: httpPort, exited: make(chan struct{}), log: &outbuf.Buffer{}}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout = s.log
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()

	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("mailpit exited before it was ready:\n%s", s.log.String())
		default:
		}
		if s.ready() {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("mailpit not ready after 20s:\n%s", s.log.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (s *Server) ready() bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(s.WebURL() + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	conn, err := net.DialTimeout("tcp", s.SMTPAddr(), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// Stop terminates mailpit (it is also called at cleanup; calling it twice is
// fine). After Stop, its SMTP port refuses connections.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// SMTPURL is the URL to give paygate (PAYGATE_SMTP_URL), e.g.
// smtp://127.0.0.1:40123.
func (s *Server) SMTPURL() string { return "smtp://" + s.SMTPAddr() }

// SMTPAddr is host:port of the SMTP listener.
func (s *Server) SMTPAddr() string { return "127.0.0.1:" + strconv.Itoa(s.smtpPort) }

// SMTPPort is the SMTP listener's port.
func (s *Server) SMTPPort() int { return s.smtpPort }

// WebURL is the base URL of the web UI and HTTP API.
func (s *Server) WebURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.httpPort) }

// Log is what mailpit printed so far.
func (s *Server) Log() string { return s.log.String() }

// Address is a mailbox in a message summary.
type Address struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

// Message is one message as /api/v1/messages lists it.
type Message struct {
	ID        string    `json:"ID"`        // mailpit's own id, for Get
	MessageID string    `json:"MessageID"` // the Message-ID header without angle brackets
	From      Address   `json:"From"`
	To        []Address `json:"To"`
	Subject   string    `json:"Subject"`
	Created   time.Time `json:"Created"`
	Snippet   string    `json:"Snippet"`
}

// Detail is one message in full, as /api/v1/message/{ID} returns it.
type Detail struct {
	ID        string    `json:"ID"`
	MessageID string    `json:"MessageID"`
	From      Address   `json:"From"`
	To        []Address `json:"To"`
	Subject   string    `json:"Subject"`
	Text      string    `json:"Text"`
	HTML      string    `json:"HTML"`
	// Headers are the raw headers, from /api/v1/message/{ID}/headers.
	Headers map[string][]string `json:"-"`
}

// Messages returns every message mailpit has received, newest first.
func (s *Server) Messages(t testing.TB) []Message {
	t.Helper()
	var page struct {
		Total    int       `json:"total"`
		Messages []Message `json:"messages"`
	}
	s.getJSON(t, "/api/v1/messages?limit=1000", &page)
	if page.Messages == nil {
		page.Messages = []Message{}
	}
	return page.Messages
}

// Get returns one message in full, headers included.
func (s *Server) Get(t testing.TB, id string) Detail {
	t.Helper()
	var d Detail
	s.getJSON(t, "/api/v1/message/"+id, &d)
	s.getJSON(t, "/api/v1/message/"+id+"/headers", &d.Headers)
	return d
}

// WaitForMessages waits up to 15 seconds until mailpit holds at least n
// messages and returns them all (newest first). It fails t on timeout.
func (s *Server) WaitForMessages(t testing.TB, n int) []Message {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		msgs := s.Messages(t)
		if len(msgs) >= n {
			return msgs
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailpit: waited 15s for %d messages, have %d", n, len(msgs))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DeleteAll removes every message.
func (s *Server) DeleteAll(t testing.TB) {
	t.Helper()
	s.do(t, http.MethodDelete, "/api/v1/messages", nil, nil)
}

// Trigger makes mailpit's SMTP server answer ErrorCode (400-599) to a
// command with Probability percent chance (0 disables it).
type Trigger struct {
	ErrorCode   int `json:"ErrorCode"`
	Probability int `json:"Probability"`
}

// Chaos is mailpit's set of failure triggers: MAIL FROM (Sender), RCPT TO
// (Recipient) and AUTH. Omitted triggers are disabled.
type Chaos struct {
	Sender         Trigger `json:"Sender"`
	Recipient      Trigger `json:"Recipient"`
	Authentication Trigger `json:"Authentication"`
}

// SetChaos replaces the failure triggers, e.g. Chaos{Recipient:
// Trigger{ErrorCode: 550, Probability: 100}} rejects every recipient
// permanently; Chaos{} restores normal service.
func (s *Server) SetChaos(t testing.TB, c Chaos) {
	t.Helper()
	body, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("mailpit: encode chaos: %v", err)
	}
	s.do(t, http.MethodPut, "/api/v1/chaos", body, nil)
}

func (s *Server) getJSON(t testing.TB, path string, out any) {
	t.Helper()
	s.do(t, http.MethodGet, path, nil, out)
}

func (s *Server) do(t testing.TB, method, path string, body []byte, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.WebURL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("mailpit: %s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("mailpit: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("mailpit: %s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("mailpit: %s %s: decode: %v: %s", method, path, err, b)
		}
	}
}

// Binary finds the mailpit executable: $MAILPIT_BIN, ./.tools/bin/mailpit
// under the module root (where scripts/tools.sh puts the pinned version),
// then PATH.
func Binary() (string, error) {
	if p := os.Getenv("MAILPIT_BIN"); p != "" {
		return p, nil
	}
	if root, ok := moduleRoot(); ok {
		p := filepath.Join(root, ".tools", "bin", "mailpit")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("mailpit"); err == nil {
		return p, nil
	}
	return "", errors.New("mailpit binary not found (looked at $MAILPIT_BIN, ./.tools/bin/mailpit and PATH): " +
		"run `make test`, or scripts/tools.sh to install github.com/axllent/mailpit@" + Version + " into ./.tools/bin")
}

func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
