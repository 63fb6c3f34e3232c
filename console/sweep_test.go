package console_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
)

// TestEventsPageSaysWhatTheSweepFound: the events page has a line on the
// last missed-event sweep (when, its window, what it found, and a failing
// list), and an event read from the provider's API says so, in the list
// and on its page.
func TestEventsPageSaysWhatTheSweepFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := inbox.InsertManyTx(ctx, tx, []inbox.Event{
			{Provider: "stripe", EventID: "evt_swept", Type: "charge.succeeded", Source: inbox.SourceAPI,
				Payload: []byte(`{"id":"evt_swept","object":"event","type":"charge.succeeded","data":{"object":{}}}`)},
			{Provider: "stripe", EventID: "evt_hooked", Type: "charge.captured",
				Payload: []byte(`{"id":"evt_hooked","object":"event","type":"charge.captured","data":{"object":{}}}`)},
		})
		return err
	}))
	c := client(t)
	postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {opsTok}})
	page := getPage(t, c, b.srv.URL+"/console/events")
	require.NotContains(t, page, "Missed-event sweep", "no line before any sweep")
	require.Contains(t, page, `title="read from the provider's API: its webhook never arrived">api</span>`)

	to := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	_, err := b.pool.Exec(ctx, `INSERT INTO event_sweeps (provider, swept_until, last_from, last_to, last_started_at,
			last_finished_at, last_new, last_known, last_first, last_last, failing_since, last_error)
		VALUES ('stripe', $1, $2, $1, $1, $3, 3, 97, '{"id":"evt_a","type":"charge.succeeded","created":"2025-03-14T08:30:00Z"}',
			'{"id":"evt_b","type":"charge.succeeded","created":"2025-03-14T08:40:00Z"}', $4, 'provider API: list events: 502')`,
		to, to.Add(-time.Hour), to.Add(time.Second), to.Add(time.Hour))
	require.NoError(t, err)
	page = getPage(t, c, b.srv.URL+"/console/events")
	require.Contains(t, page, `Missed-event sweep of stripe: last 2025-03-14 09:00:01 UTC, events created 2025-03-14 08:00:00 UTC to 2025-03-14 09:00:00 UTC: 3 new`)
	require.Contains(t, page, `97 already here`)
	require.Contains(t, page, `listing has failed since 2025-03-14 10:00:00 UTC: provider API: list events: 502`)

	event := getPage(t, c, b.srv.URL+"/console/events/stripe/evt_swept")
	require.Contains(t, event, `<dd id="event-source">read from stripe's API: its webhook never arrived</dd>`)
	require.Contains(t, getPage(t, c, b.srv.URL+"/console/events/stripe/evt_hooked"), `<dd id="event-source">webhook</dd>`)
}
