package webhook_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

// hostileEnvelope is a valid event whose parts a test replaces: id, type and
// created are JSON texts spliced in as they are.
func hostileEnvelope(id, typ, created string) []byte {
	fields := []string{`"id":` + id, `"object":"event"`, `"api_version":"2024-06-20"`}
	if created != "" {
		fields = append(fields, `"created":`+created)
	}
	fields = append(fields, `"livemode":false`, `"type":`+typ,
		`"data":{"object":{"id":"pi_hostile","object":"payment_intent","amount":1000,"currency":"usd"}}`)
	return []byte("{" + strings.Join(fields, ",") + "}")
}

// hostileBodies are signed bodies a sender holding the secret could send
// that no two readers read alike, or that cannot be stored: each must be
// answered 400 and leave nothing behind.
func hostileBodies() map[string][]byte {
	now := fmt.Sprint(time.Now().Unix())
	env := func(id, typ, created string) []byte { return hostileEnvelope(id, typ, created) }
	return map[string][]byte{
		// 2 and 3: a created PostgreSQL cannot store, or the books must not
		// be dated by.
		"created absent":          env(`"evt_h_c1"`, `"payment_intent.succeeded"`, ""),
		"created null":            env(`"evt_h_c2"`, `"payment_intent.succeeded"`, "null"),
		"created zero":            env(`"evt_h_c3"`, `"payment_intent.succeeded"`, "0"),
		"created negative":        env(`"evt_h_c4"`, `"payment_intent.succeeded"`, "-5000000000"),
		"created int64 max":       env(`"evt_h_c5"`, `"payment_intent.succeeded"`, "9223372036854775807"),
		"created int64 min":       env(`"evt_h_c6"`, `"payment_intent.succeeded"`, "-9223372036854775808"),
		"created in 1999":         env(`"evt_h_c7"`, `"payment_intent.succeeded"`, "946684799"),
		"created in 2100":         env(`"evt_h_c8"`, `"payment_intent.succeeded"`, "4102444800"),
		"created in year 287000":  env(`"evt_h_c9"`, `"payment_intent.succeeded"`, "9000000000000"),
		"created past PostgreSQL": env(`"evt_h_c12"`, `"payment_intent.succeeded"`, "10000000000000"),
		"created as a string":     env(`"evt_h_c10"`, `"payment_intent.succeeded"`, `"1700000000"`),
		"created twice":           []byte(strings.Replace(string(env(`"evt_h_c11"`, `"payment_intent.succeeded"`, now)), `"livemode"`, `"created":4102444800000,"livemode"`, 1)),
		// 4: keys that encoding/json folds onto a field and jsonb does not.
		"id and ID":                []byte(strings.Replace(string(env(`"evt_h_k1"`, `"payment_intent.succeeded"`, now)), `"object":"event"`, `"object":"event","ID":"evt_h_k1_other"`, 1)),
		"ID only":                  []byte(strings.Replace(string(env(`"evt_h_k2"`, `"payment_intent.succeeded"`, now)), `"id":"evt_h_k2"`, `"ID":"evt_h_k2"`, 1)),
		"type and TYPE":            []byte(strings.Replace(string(env(`"evt_h_k3"`, `"payment_intent.succeeded"`, now)), `"livemode"`, `"TYPE":"charge.refunded","livemode"`, 1)),
		"Data":                     []byte(strings.Replace(string(env(`"evt_h_k4"`, `"payment_intent.succeeded"`, now)), `"data":`, `"Data":`, 1)),
		"data.Object":              []byte(strings.Replace(string(env(`"evt_h_k5"`, `"payment_intent.succeeded"`, now)), `{"object":{"id":"pi_hostile"`, `{"Object":{"id":"pi_hostile"`, 1)),
		"data.object and Object":   []byte(strings.Replace(string(env(`"evt_h_k6"`, `"payment_intent.succeeded"`, now)), `"data":{`, `"data":{"Object":{"id":"pi_other","amount":1},`, 1)),
		"long s folds to s":        []byte(strings.Replace(string(env(`"evt_h_k7"`, `"payment_intent.succeeded"`, now)), `"livemode":false`, `"livemode":false,"api_ver\u017fion":"1999-01-01"`, 1)),
		"duplicate id":             []byte(strings.Replace(string(env(`"evt_h_d1"`, `"payment_intent.succeeded"`, now)), `"object":"event"`, `"object":"event","id":"evt_h_d1_other"`, 1)),
		"duplicate id, escaped":    []byte(strings.Replace(string(env(`"evt_h_d2"`, `"payment_intent.succeeded"`, now)), `"object":"event"`, `"object":"event","\u0069d":"evt_h_d2_other"`, 1)),
		"duplicate type":           []byte(strings.Replace(string(env(`"evt_h_d3"`, `"payment_intent.succeeded"`, now)), `"livemode"`, `"type":"charge.refunded","livemode"`, 1)),
		"duplicate in data.object": []byte(strings.Replace(string(env(`"evt_h_d4"`, `"payment_intent.succeeded"`, now)), `"amount":1000`, `"amount":1000,"amount":99999`, 1)),
		// 5: ids that encoding/json turns into U+FFFD, merging events.
		"invalid UTF-8 in id":       env("\"evt_h_u1_\xff\"", `"payment_intent.succeeded"`, now),
		"other invalid UTF-8 in id": env("\"evt_h_u1_\xfe\"", `"payment_intent.succeeded"`, now),
		"lone surrogate in id":      env(`"evt_h_u1_\ud800"`, `"payment_intent.succeeded"`, now),
		"lone low surrogate in id":  env(`"evt_h_u1_\udc00"`, `"payment_intent.succeeded"`, now),
		"invalid UTF-8 in type":     env(`"evt_h_u2"`, "\"charge.\xc3\"", now),
		"lone surrogate in type":    env(`"evt_h_u3"`, `"charge.\ud83d"`, now),
		"invalid UTF-8 in a key":    []byte(strings.Replace(string(env(`"evt_h_u4"`, `"payment_intent.succeeded"`, now)), `"livemode"`, "\"x\xff\":1,\"livemode\"", 1)),
		"invalid UTF-8 deep":        []byte(strings.Replace(string(env(`"evt_h_u5"`, `"payment_intent.succeeded"`, now)), `"currency":"usd"`, "\"currency\":\"usd\",\"description\":\"\xed\xa0\x80\"", 1)),
		"NUL deep":                  []byte(strings.Replace(string(env(`"evt_h_u6"`, `"payment_intent.succeeded"`, now)), `"currency":"usd"`, `"currency":"usd","description":"a\u0000b"`, 1)),
	}
}

// TestHostileSignedBodiesAreRefused: each hostile body, correctly signed,
// is a 400 problem naming the event as malformed, and nothing is stored;
// with either ingester. On the old decoding these were stored under an id
// or type other readers do not see (200), or failed the commit for ever
// (503).
func TestHostileSignedBodiesAreRefused(t *testing.T) {
	t.Parallel()
	for name, ingester := range ingesters() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(pool *pgxpool.Pool, jc *jobs.Client) webhook.Ingester {
				return ingester(t, pool, jc)
			})
			for what, body := range hostileBodies() {
				rec := b.post(t, body, sign(t, body, secretA, time.Now()))
				require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", what, rec.Body.String())
				var p api.Problem
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), what)
				require.Equal(t, "Not an event", p.Title, what)
				require.NotContains(t, p.Detail, "pi_hostile", "%s: the detail does not echo the body", what)
			}
			require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events`))
			require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`))
		})
	}
}

// TestDistinctInvalidIDsAreNotMerged: three signed events whose ids differ
// only in bytes that are not text were all filed as "evt_…\ufffd": one row,
// two acknowledged as duplicates and lost. Each is refused instead, and a
// genuine event whose id is that replacement character is its own event.
func TestDistinctInvalidIDsAreNotMerged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := fmt.Sprint(time.Now().Unix())
	for _, id := range []string{"\"evt_merge_\xff\"", "\"evt_merge_\xfe\"", `"evt_merge_\ud800"`} {
		body := hostileEnvelope(id, `"payment_intent.succeeded"`, now)
		rec := b.post(t, body, sign(t, body, secretA, time.Now()))
		require.Equal(t, http.StatusBadRequest, rec.Code, "%q: %s", id, rec.Body.String())
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events`))

	body := hostileEnvelope(`"evt_merge_\ufffd"`, `"payment_intent.succeeded"`, now)
	rec := b.post(t, body, sign(t, body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, stripe.Acknowledgement{Received: true, Duplicate: false}, decode(t, rec))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM inbox_events WHERE event_id = $1`, "evt_merge_\uFFFD"))
}

// TestStoredIdentityIsWhatPostgresReads: for accepted events the stored
// event_id and type are what PostgreSQL's jsonb reads from the stored
// payload, and created lands in provider_created_at as sent; a body whose
// ID differs from its id in case only is refused rather than stored under
// either, so a later genuine event with the other id is not a duplicate.
func TestStoredIdentityIsWhatPostgresReads(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	body := hostileEnvelope(`"evt_same_A"`, `"payment_intent.succeeded"`, fmt.Sprint(created.Unix()))
	rec := b.post(t, body, sign(t, body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	var id, typ, jsonID, jsonType string
	var at time.Time
	require.NoError(t, b.pool.QueryRow(t.Context(), `
		SELECT event_id, type, convert_from(payload, 'UTF8')::jsonb->>'id', convert_from(payload, 'UTF8')::jsonb->>'type', provider_created_at
		FROM inbox_events`).Scan(&id, &typ, &jsonID, &jsonType, &at))
	require.Equal(t, jsonID, id)
	require.Equal(t, jsonType, typ)
	require.True(t, created.Equal(at), "created %s stored as %s", created, at)

	spoof := []byte(strings.Replace(string(hostileEnvelope(`"evt_same_B"`, `"payment_intent.succeeded"`, fmt.Sprint(created.Unix()))),
		`"id":"evt_same_B"`, `"id":"evt_same_C","ID":"evt_same_B"`, 1))
	rec = b.post(t, spoof, sign(t, spoof, secretA, time.Now()))
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	genuine := hostileEnvelope(`"evt_same_B"`, `"payment_intent.succeeded"`, fmt.Sprint(created.Unix()))
	rec = b.post(t, genuine, sign(t, genuine, secretA, time.Now()))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, stripe.Acknowledgement{Received: true, Duplicate: false}, decode(t, rec), "the genuine evt_same_B is new")
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM inbox_events`))
}
