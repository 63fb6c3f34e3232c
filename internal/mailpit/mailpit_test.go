package mailpit_test

import (
	"fmt"
	"net"
	"net/smtp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/mailpit"
)

func send(addr, to, subject string) error {
	msg := fmt.Sprintf("From: a@example.com\r\nTo: %s\r\nSubject: %s\r\nMessage-ID: <%s@test>\r\n\r\nhello\r\n", to, subject, subject)
	return smtp.SendMail(addr, nil, "a@example.com", []string{to}, []byte(msg))
}

func TestStartSendReadStop(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	require.True(t, strings.HasPrefix(mp.SMTPURL(), "smtp://127.0.0.1:"))
	require.Empty(t, mp.Messages(t))

	require.NoError(t, send(mp.SMTPAddr(), "b@example.com", "one"))
	msgs := mp.WaitForMessages(t, 1)
	require.Len(t, msgs, 1)
	require.Equal(t, "one", msgs[0].Subject)
	require.Equal(t, "one@test", msgs[0].MessageID)
	require.Equal(t, "b@example.com", msgs[0].To[0].Address)
	d := mp.Get(t, msgs[0].ID)
	require.Contains(t, d.Text, "hello")
	require.Equal(t, []string{"<one@test>"}, d.Headers["Message-Id"])

	mp.DeleteAll(t)
	require.Empty(t, mp.Messages(t))

	mp.Stop()
	_, err := net.Dial("tcp", mp.SMTPAddr())
	require.Error(t, err, "a stopped mailpit must refuse connections")
}

func TestChaosRejects(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	mp.SetChaos(t, mailpit.Chaos{Recipient: mailpit.Trigger{ErrorCode: 550, Probability: 100}})
	err := send(mp.SMTPAddr(), "b@example.com", "rejected")
	require.ErrorContains(t, err, "550")
	mp.SetChaos(t, mailpit.Chaos{})
	require.NoError(t, send(mp.SMTPAddr(), "b@example.com", "accepted"))
	require.Len(t, mp.WaitForMessages(t, 1), 1)
}

func TestStartOnAGivenPort(t *testing.T) {
	t.Parallel()
	port := freeport.MustPort(t)
	require.Error(t, send(fmt.Sprintf("127.0.0.1:%d", port), "b@example.com", "down"), "nothing listens yet")
	mp := mailpit.StartWithOpts(t, &mailpit.Opts{SMTPPort: port})
	require.Equal(t, port, mp.SMTPPort())
	require.NoError(t, send(mp.SMTPAddr(), "b@example.com", "up"))
}
