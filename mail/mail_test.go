package mail_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/mailpit"
	"github.com/paygate/paygate/mail"
)

func message(to, id string) mail.Message {
	return mail.Message{
		From:      "Paygate <paygate@example.com>",
		To:        to,
		Subject:   "Receipt\r\nBcc: injected@example.com",
		Text:      "You paid $360.00.",
		HTML:      "<p>You paid <strong>$360.00</strong>.</p>",
		MessageID: id,
	}
}

func newSender(t *testing.T, url string) *mail.Sender {
	t.Helper()
	s, err := mail.New(mail.Config{URL: url, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return s
}

func TestNewURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"smtp://localhost:1025", "smtp://mail.example.com", "smtps://user:secret@mail.example.com:465",
		"smtps://mail.example.com", "smtp://user@[::1]:2525",
	} {
		_, err := mail.New(mail.Config{URL: u})
		require.NoError(t, err, u)
	}
	for _, u := range []string{
		"", "localhost:25", "http://mail.example.com", "smtp://", "smtp://host:0", "smtp://host:99999",
		"smtp://user:s3cr3t@host:port", "smtp://user:s3cr3t@host:1%zz",
	} {
		_, err := mail.New(mail.Config{URL: u})
		require.ErrorIs(t, err, mail.ErrInvalidURL, u)
		require.NotContains(t, err.Error(), "s3cr3t", "an error must never print the password")
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"jenny.rosen@example.com":         "j…@example.com",
		"Jenny <jenny.rosen@example.com>": "j…@example.com",
		"é@example.com":                   "é…@example.com",
		"not an address":                  "…",
		"":                                "…",
	} {
		require.Equal(t, want, mail.Redact(in), in)
	}
}

func TestSendDelivers(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	s := newSender(t, mp.SMTPURL())
	require.NoError(t, s.Send(context.Background(), message("jenny@example.com", "payment_receipt.pi_1@paygate")))

	msgs := mp.WaitForMessages(t, 1)
	require.Len(t, msgs, 1)
	d := mp.Get(t, msgs[0].ID)
	require.Equal(t, "payment_receipt.pi_1@paygate", d.MessageID)
	require.Equal(t, []string{"<payment_receipt.pi_1@paygate>"}, d.Headers["Message-Id"])
	require.Equal(t, []string{"auto-generated"}, d.Headers["Auto-Submitted"])
	require.Equal(t, "paygate@example.com", d.From.Address)
	require.Equal(t, "jenny@example.com", d.To[0].Address)
	require.Equal(t, "Receipt Bcc: injected@example.com", d.Subject, "a newline in a subject must not start a header")
	require.Empty(t, d.Headers["Bcc"])
	require.Contains(t, d.Text, "You paid $360.00.")
	require.Contains(t, d.HTML, "<strong>$360.00</strong>")
}

// selfSigned writes a certificate for 127.0.0.1 and its key under dir and
// returns their paths and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// TestSendSTARTTLSWithAuth: smtp:// upgrades with STARTTLS when the server
// offers it (this one requires it) and authenticates over the encrypted
// connection; the certificate is verified.
func TestSendSTARTTLSWithAuth(t *testing.T) {
	t.Parallel()
	certFile, keyFile, roots := selfSigned(t)
	mp := mailpit.StartWithOpts(t, &mailpit.Opts{Args: []string{
		"--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile, "--smtp-require-starttls",
		"--smtp-auth-accept-any",
	}})
	url := strings.Replace(mp.SMTPURL(), "smtp://", "smtp://user:secret@", 1)

	s, err := mail.New(mail.Config{URL: url, Timeout: 5 * time.Second, RootCAs: roots})
	require.NoError(t, err)
	require.NoError(t, s.Send(context.Background(), message("a@example.com", "x.1@paygate")))
	require.Len(t, mp.WaitForMessages(t, 1), 1)

	// The same server with the system's roots: the certificate is not
	// trusted, nothing is sent, and that is not a permanent rejection.
	err = newSender(t, url).Send(context.Background(), message("a@example.com", "x.2@paygate"))
	require.Error(t, err)
	require.NotErrorIs(t, err, mail.ErrRejected)
	require.Len(t, mp.Messages(t), 1)
}

// TestSendRefusesClearTextPassword: a server without STARTTLS never gets
// the password.
func TestSendRefusesClearTextPassword(t *testing.T) {
	t.Parallel()
	mp := mailpit.StartWithOpts(t, &mailpit.Opts{Args: []string{"--smtp-auth-accept-any", "--smtp-auth-allow-insecure"}})
	url := strings.Replace(mp.SMTPURL(), "smtp://", "smtp://user:secret@", 1)
	err := newSender(t, url).Send(context.Background(), message("a@example.com", "x.1@paygate"))
	require.Error(t, err)
	require.NotErrorIs(t, err, mail.ErrRejected)
	require.NotContains(t, err.Error(), "secret")
	require.Empty(t, mp.Messages(t))
}

func TestSendPermanentRejection(t *testing.T) {
	t.Parallel()
	mp := mailpit.StartWithOpts(t, &mailpit.Opts{Args: []string{"--smtp-allowed-recipients", `@allowed\.example$`}})
	err := newSender(t, mp.SMTPURL()).Send(context.Background(), message("jenny.rosen@blocked.example", "x.1@paygate"))
	require.ErrorIs(t, err, mail.ErrRejected)
	var me *mail.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, 550, me.Code)
	require.True(t, me.Permanent)
	require.NotContains(t, err.Error(), "jenny.rosen", "errors end up in logs: no full recipient address")
	require.Contains(t, err.Error(), "j…@blocked.example")
	require.Empty(t, mp.Messages(t))
}

func TestSendTransientFailures(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		url := fmt.Sprintf("smtp://127.0.0.1:%d", freeport.MustPort(t))
		err := newSender(t, url).Send(context.Background(), message("a@example.com", "x.1@paygate"))
		require.Error(t, err)
		require.NotErrorIs(t, err, mail.ErrRejected)
		require.NotErrorIs(t, err, mail.ErrInvalidMessage)
	})
	t.Run("451 on MAIL FROM", func(t *testing.T) {
		t.Parallel()
		mp := mailpit.Start(t)
		mp.SetChaos(t, mailpit.Chaos{Sender: mailpit.Trigger{ErrorCode: 451, Probability: 100}})
		err := newSender(t, mp.SMTPURL()).Send(context.Background(), message("a@example.com", "x.1@paygate"))
		var me *mail.Error
		require.ErrorAs(t, err, &me)
		require.Equal(t, 451, me.Code)
		require.NotErrorIs(t, err, mail.ErrRejected)
	})
	t.Run("context deadline", func(t *testing.T) {
		t.Parallel()
		mp := mailpit.Start(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := newSender(t, mp.SMTPURL()).Send(ctx, message("a@example.com", "x.1@paygate"))
		require.Error(t, err)
		require.NotErrorIs(t, err, mail.ErrRejected)
	})
}

func TestSendInvalidMessage(t *testing.T) {
	t.Parallel()
	s := newSender(t, "smtp://127.0.0.1:1") // never dialled: the message is refused first
	for name, m := range map[string]mail.Message{
		"recipient":  message("not an address", "x.1@paygate"),
		"from":       {From: "nope", To: "a@example.com", Text: "x", MessageID: "x.1@paygate"},
		"message id": message("a@example.com", "<x.1@paygate>"),
		"body":       {From: "p@example.com", To: "a@example.com", MessageID: "x.1@paygate"},
	} {
		err := s.Send(context.Background(), m)
		require.ErrorIs(t, err, mail.ErrInvalidMessage, name)
		require.False(t, errors.Is(err, mail.ErrRejected), name)
	}
}
