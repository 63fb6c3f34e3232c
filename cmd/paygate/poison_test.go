package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

// TestPoisonCLI drives `paygate poison` against a real database, as an
// operator on the box would. (Not parallel: it sets the environment.)
func TestPoisonCLI(t *testing.T) {
	pool, url := testdb.NewWithURL(t)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("USER", "alice") // anyone can set $USER: the audit log names the OS account instead
	ctx := context.Background()
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	base := time.Date(2024, 6, 20, 12, 0, 0, 0, time.UTC)
	for i, id := range []string{"evt_cli_old", "evt_cli_new", "evt_cli_ok"} {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			payload := fmt.Sprintf(`{"id":%q,"object":"event","type":"charge.succeeded","data":{"object":{"currency":"zzz"}}}`, id)
			if _, err := inbox.InsertTx(ctx, tx, inbox.Event{Provider: "stripe", EventID: id, Type: "charge.succeeded", Payload: []byte(payload)}); err != nil {
				return err
			}
			if err := jc.InsertProcessEventTx(ctx, tx, "stripe", id); err != nil {
				return err
			}
			status := inbox.StatusPoison
			if id == "evt_cli_ok" {
				status = inbox.StatusProcessed
			}
			if err := inbox.SetStatusTx(ctx, tx, "stripe", id, status, "unknown currency \"zzz\"\nsecond line", true); err != nil {
				return err
			}
			return testdb.Backdate(ctx, tx, id, base.Add(time.Duration(i)*time.Hour))
		}))
	}
	_, err = pool.Exec(ctx, `UPDATE river_job SET errors = ARRAY['{"at":"2024-06-20T13:00:01Z","attempt":1,"error":"unknown currency","trace":""}'::jsonb]
		WHERE args->>'event_id' = 'evt_cli_new'`)
	require.NoError(t, err)

	paygate := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"poison"}, args...), &out, &errOut)
		return out.String(), err
	}

	out, err := paygate("list")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^EVENT ID\s+TYPE\s+ATTEMPTS\s+RECEIVED\s+LAST ERROR$`, lines[0])
	require.Regexp(t, `^evt_cli_new\s+charge\.succeeded\s+1\s+2024-06-20T13:00:00Z\s+unknown currency "zzz" second line$`, lines[1],
		"newest first, one line per event")
	require.True(t, strings.HasPrefix(lines[2], "evt_cli_old"))
	require.NotContains(t, out, "evt_cli_ok")

	out, err = paygate("list", "--limit", "1")
	require.NoError(t, err)
	require.Contains(t, out, "evt_cli_new")
	require.NotContains(t, out, "evt_cli_old")
	i := strings.Index(out, "--cursor ")
	require.Positive(t, i, out)
	cursor := strings.TrimSpace(out[i+len("--cursor "):])
	out, err = paygate("list", "--limit", "1", "--cursor", cursor)
	require.NoError(t, err)
	require.Contains(t, out, "evt_cli_old")
	require.NotContains(t, out, "--cursor")

	out, err = paygate("list", "--before", "2024-06-20T12:30:00Z")
	require.NoError(t, err)
	require.Contains(t, out, "evt_cli_old")
	require.NotContains(t, out, "evt_cli_new")
	out, err = paygate("list", "--error", "no such text")
	require.NoError(t, err)
	require.Equal(t, "no poison events\n", out)

	out, err = paygate("show", "evt_cli_new")
	require.NoError(t, err)
	var shown struct {
		EventID string          `json:"event_id"`
		Status  string          `json:"status"`
		Payload json.RawMessage `json:"payload"`
		Errors  []struct {
			Error string `json:"error"`
		} `json:"errors"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	require.Equal(t, "evt_cli_new", shown.EventID)
	require.Equal(t, "poison", shown.Status)
	require.Contains(t, string(shown.Payload), `"currency": "zzz"`, "the payload, pretty")
	require.Len(t, shown.Errors, 1)
	require.Equal(t, "unknown currency", shown.Errors[0].Error)

	var ue usageError
	_, err = paygate("discard", "evt_cli_new")
	require.ErrorAs(t, err, &ue, "a discard needs --reason")
	_, err = paygate("show")
	require.ErrorAs(t, err, &ue)
	_, err = paygate("frobnicate")
	require.ErrorAs(t, err, &ue)
	_, err = paygate("list", "--after", "noon")
	require.ErrorAs(t, err, &ue)
	_, err = paygate("show", "evt_nope")
	require.ErrorIs(t, err, inbox.ErrNotFound)
	_, err = paygate("discard", "evt_cli_ok", "--reason", "x")
	require.True(t, errors.Is(err, inbox.ErrAlreadyProcessed), "%v", err)

	out, err = paygate("discard", "evt_cli_new", "--reason", "sandbox event")
	require.NoError(t, err)
	require.Contains(t, out, "discarded evt_cli_new")
	out, err = paygate("replay", "--reason", "try again", "evt_cli_old")
	require.NoError(t, err)
	require.Contains(t, out, "replayed evt_cli_old: status received")

	ev, err := inbox.Get(ctx, pool, "stripe", "evt_cli_new")
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDiscarded, ev.Status)
	ev, err = inbox.Get(ctx, pool, "stripe", "evt_cli_old")
	require.NoError(t, err)
	require.Equal(t, inbox.StatusReceived, ev.Status)
	var jobsOld int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'event_id' = 'evt_cli_old'`).Scan(&jobsOld))
	require.Equal(t, 2, jobsOld, "a new process_event job")

	osUser, err := user.Current()
	require.NoError(t, err)
	entries, _, err := inbox.ListAudit(ctx, pool, inbox.AuditFilter{}, inbox.Page{})
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, inbox.ActionReplay, entries[0].Action)
	require.Equal(t, "try again", entries[0].Reason)
	require.Equal(t, inbox.ActionDiscard, entries[1].Action)
	require.Equal(t, "sandbox event", entries[1].Reason)
	for _, e := range entries {
		require.Equal(t, "cli:"+osUser.Username, e.Actor)
		require.Empty(t, e.IdempotencyKey)
	}
}
