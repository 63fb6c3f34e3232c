package webhook_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/strictjson"
	"github.com/paygate/paygate/webhook"
)

// FuzzStoredIdentityMatchesPostgres sends every body, signed, through the
// real handler into a real inbox. Whatever it answers, it is never a 5xx (a
// sender's body must not become a 503 the provider retries for days); and
// for every accepted body, PostgreSQL reading the body as jsonb finds the
// id and type it was filed under, the stored row's event_id and type are
// what jsonb reads from the stored payload, and its created time is within
// the sane window.
func FuzzStoredIdentityMatchesPostgres(f *testing.F) {
	now := fmt.Sprint(time.Now().Unix())
	for _, seed := range []string{
		string(eventBody("evt_fz_1")),
		`{"id":"evt_fz_2","object":"event","type":"charge.succeeded","created":` + now + `,"data":{"object":{"id":"ch_1"}}}`,
		`{"id":"evt_fz_3","ID":"evt_fz_4","object":"event","type":"charge.succeeded","created":` + now + `,"data":{"object":{}}}`,
		`{"id":"evt_fz_5","object":"event","type":"x","TYPE":"y","created":` + now + `,"data":{"object":{}}}`,
		`{"id":"evt_fz_6","object":"event","type":"x","created":` + now + `,"Data":{"Object":{}},"data":{"object":{}}}`,
		`{"id":"evt_fz_7","id":"evt_fz_8","object":"event","type":"x","created":` + now + `,"data":{"object":{}}}`,
		`{"id":"evt_fz_\ud800","object":"event","type":"x","created":` + now + `,"data":{"object":{}}}`,
		"{\"id\":\"evt_fz_\xff\",\"object\":\"event\",\"type\":\"x\",\"created\":" + now + ",\"data\":{\"object\":{}}}",
		`{"id":"evt_fz_\ud83d\ude00","object":"event","type":"x","created":` + now + `,"data":{"object":{"a":"\u0000"}}}`,
		`{"id":"evt_fz_9","object":"event","type":"x","created":9223372036854775807,"data":{"object":{}}}`,
		`{"id":"evt_fz_10","object":"event","type":"x","created":` + now + `,"data":{"object":{"n":1e200000}}}`,
		`{"id":"evt_fz_11","object":"event","type":"x","created":` + now + `,"data":{"object":{"n":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}}`,
		`{"id":"evt_fz_\u00e9","object":"event","type":"x\/y","created":` + now + `,"data":{"object":{}}}`,
	} {
		f.Add([]byte(seed))
	}
	pool := testdb.New(f)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(f, err)
	e, _ := api.NewEcho(api.Config{Pool: pool})
	webhook.NewHandler(webhook.Config{
		Ingester:     &webhook.TxIngester{Pool: pool, Enqueue: jc},
		Receivers:    []provider.Receiver{stripe.NewReceiver([]string{secretA}, 0)},
		MaxBodyBytes: 64 << 10,
	}).Register(e)
	b := &testBundle{pool: pool, echo: e}

	f.Fuzz(func(t *testing.T, body []byte) {
		rec := b.post(t, body, sign(t, body, secretA, time.Now()))
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return
		default:
			t.Fatalf("%q answered %d: %s", body, rec.Code, rec.Body.String())
		}
		ev, err := stripe.DecodeEvent(body)
		if err != nil {
			t.Fatalf("%q accepted by the handler, refused by the decoder: %v", body, err)
		}
		var (
			bodyID, bodyType       *string
			eventID, typ           string
			storedID, storedType   *string
			created                time.Time
			sameBody, createdSaved bool
		)
		err = pool.QueryRow(t.Context(), `
			SELECT convert_from($2::bytea, 'UTF8')::jsonb->>'id', convert_from($2::bytea, 'UTF8')::jsonb->>'type',
			       event_id, type,
			       convert_from(payload, 'UTF8')::jsonb->>'id', convert_from(payload, 'UTF8')::jsonb->>'type',
			       provider_created_at, payload = $2::bytea, provider_created_at = $3
			FROM inbox_events WHERE provider = 'stripe' AND event_id = $1`, ev.ID, body, ev.Created).
			Scan(&bodyID, &bodyType, &eventID, &typ, &storedID, &storedType, &created, &sameBody, &createdSaved)
		if err != nil {
			t.Fatalf("%q accepted as %q: reading it back: %v", body, ev.ID, err)
		}
		if bodyID == nil || *bodyID != ev.ID || bodyType == nil || *bodyType != ev.Type {
			t.Fatalf("%q filed as id %q type %q; jsonb reads id %v type %v", body, ev.ID, ev.Type, deref(bodyID), deref(bodyType))
		}
		if storedID == nil || *storedID != eventID || storedType == nil || *storedType != typ {
			t.Fatalf("stored row %q/%q; jsonb reads its payload as %v/%v", eventID, typ, deref(storedID), deref(storedType))
		}
		if created.Unix() < strictjson.MinUnix || created.Unix() >= strictjson.MaxUnix {
			t.Fatalf("%q stored with created %s", body, created)
		}
		if !decode(t, rec).Duplicate && (!sameBody || !createdSaved) {
			t.Fatalf("%q is new but stored as another payload or created", body)
		}
	})
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}
