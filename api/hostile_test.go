package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/inbox"
)

// deepPayload is a signed-looking event of about size bytes whose
// data.object nests arrays as deep as it can.
func deepPayload(id string, size int) string {
	head := `{"id":"` + id + `","object":"event","type":"charge.succeeded","created":1700000000,"data":{"object":{"id":"ch_deep","nest":`
	tail := `}}}`
	depth := (size - len(head) - len(tail)) / 2
	return head + strings.Repeat("[", depth) + strings.Repeat("]", depth) + tail
}

// TestEventViewAnswerIsBoundedByThePayload: the event view answers the
// payload as it is stored, byte for byte, so the answer is the payload plus
// a few hundred bytes whatever its shape. Re-indenting it cost the square
// of its nesting depth: 8 KB of brackets made a 32 MB answer.
func TestEventViewAnswerIsBoundedByThePayload(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	payload := deepPayload("evt_deep", 8<<10)
	b.seed(t, "evt_deep", seedOpts{payload: payload})
	spaced := "{ \"id\" : \"evt_spaced\",\n\t\"object\":\"event\", \"type\":\"charge.succeeded\", \"data\":{\"object\":{\"a\":\"<&>\"}} }"
	b.seed(t, "evt_spaced", seedOpts{payload: spaced})

	rec := b.do(t, http.MethodGet, "/v1/events/stripe/evt_deep", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.LessOrEqual(t, rec.Body.Len(), len(payload)+1024, "the answer is the payload and the event's fields")
	require.True(t, bytes.Contains(rec.Body.Bytes(), []byte(payload)), "the payload is answered as stored")
	var v map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), "the answer is one JSON document")
	require.Equal(t, `"evt_deep"`, string(v["event_id"]))

	rec = b.do(t, http.MethodGet, "/v1/events/stripe/evt_spaced", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	require.Equal(t, spaced, string(v["payload"]), "spacing and characters as the provider sent them")
}

// TestV1BodiesAreReadAsEveryReaderReadsThem: a /v1 body whose keys match a
// field only in another case, name it twice, or hold text that is not
// UTF-8 (a lone surrogate included) is refused with 400 and changes nothing.
// encoding/json alone folded "REASON" onto reason, kept the last of two
// keys and turned \ud800 into U+FFFD.
func TestV1BodiesAreReadAsEveryReaderReadsThem(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_strict", seedOpts{})
	discard := "/v1/ops/events/stripe/evt_strict/discard"
	for name, c := range map[string]struct{ path, token, body string }{
		"reason in capitals":      {discard, opsTok, `{"REASON":"typo fixed"}`},
		"reason twice":            {discard, opsTok, `{"reason":"a","reason":"b"}`},
		"reason and Reason":       {discard, opsTok, `{"reason":"a","Reason":"b"}`},
		"lone surrogate":          {discard, opsTok, `{"reason":"bad \ud800 text"}`},
		"invalid UTF-8":           {discard, opsTok, "{\"reason\":\"bad \xff text\"}"},
		"two documents":           {discard, opsTok, `{"reason":"a"} {"reason":"b"}`},
		"replay status twice":     {"/v1/ops/replay", opsTok, `{"status":"discarded","status":"poison"}`},
		"replay Type":             {"/v1/ops/replay", opsTok, `{"Type":"charge.succeeded"}`},
		"reconciliation Date":     {"/v1/reconciliation/runs", financeTok, `{"Date":"2025-03-01"}`},
		"reconciliation date x 2": {"/v1/reconciliation/runs", financeTok, `{"date":"2025-03-01","date":"2025-03-02"}`},
	} {
		rec := b.do(t, http.MethodPost, c.path, c.token, "strict-"+strings.ReplaceAll(name, " ", "-"), c.body)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", name, rec.Body.String())
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), name)
	}
	require.Equal(t, inbox.StatusPoison, b.status(t, "evt_strict"))
	require.Zero(t, b.count(t, `SELECT count(*) FROM ops_audit_log`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM reconciliation_runs`))
}

// TestBulkReplayNeedsAFilter: a bulk replay without any filter (no body,
// {}, or only dry_run and reason) is refused: "replay everything" must be
// said ({"status":"poison"}), never implied by an empty body.
func TestBulkReplayNeedsAFilter(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_nofilter", seedOpts{})
	for name, body := range map[string]string{
		"no body":         "",
		"empty object":    `{}`,
		"only dry_run":    `{"dry_run":true}`,
		"only reason":     `{"reason":"outage over","dry_run":false}`,
		"empty filters":   `{"status":"","type":"","error":"","received_after":null}`,
		"whitespace only": " \n ",
	} {
		rec := b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "nofilter-"+strings.ReplaceAll(name, " ", "-"), body)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", name, rec.Body.String())
		var p api.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), name)
		require.Contains(t, p.Detail, "filter", name)
	}
	require.Equal(t, 1, b.jobCount(t, "evt_nofilter"), "nothing was replayed")
	require.Equal(t, inbox.StatusPoison, b.status(t, "evt_nofilter"))

	rec := b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "filter-explicit", `{"status":"poison","dry_run":true}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"matched":1,"replayed":0,"dry_run":true}`, rec.Body.String())
}

// TestIdempotencyFingerprintIsTheDecodedRequest: the fingerprint is over the
// request as the handler reads it. Two bodies the old fingerprint (over
// case-sensitive keys) held equal while the decoder (case-insensitive, last
// key wins) read one as a dry run and the other as a real replay no longer
// share an answer; and bodies that mean the same (key order, spacing,
// escapes, a default spelled out) do.
func TestIdempotencyFingerprintIsTheDecodedRequest(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_fp", seedOpts{})

	dry := `{"status":"poison","dry_run":false,"DRY_RUN":true}`
	real := `{"status":"poison","DRY_RUN":true,"dry_run":false}`
	first := b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "fp-case", dry)
	second := b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "fp-case", real)
	require.Empty(t, second.Header().Get(api.HeaderIdempotentReplayed),
		"another request must not get the first one's stored answer: %d %s", second.Code, second.Body.String())
	require.Equal(t, http.StatusBadRequest, first.Code, first.Body.String())
	require.Equal(t, http.StatusBadRequest, second.Code, second.Body.String())
	require.Equal(t, 1, b.jobCount(t, "evt_fp"), "nothing was replayed")

	for name, again := range map[string]string{
		"key order":           `{"dry_run":true,"status":"poison"}`,
		"spacing":             "{ \"status\" : \"poison\" ,\n \"dry_run\" : true }",
		"escapes":             `{"status":"p\u006fison","dry_run":true}`,
		"default spelled out": `{"status":"poison","dry_run":true,"type":"","reason":"","received_after":null}`,
	} {
		rec := b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "fp-same", `{"status":"poison","dry_run":true}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		rec = b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "fp-same", again)
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", name, rec.Body.String())
		require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed), "%s means the same request", name)
	}
	rec := b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "fp-same", `{"status":"poison","dry_run":false}`)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code, "a real replay is another request: %s", rec.Body.String())
	require.Equal(t, 1, b.jobCount(t, "evt_fp"))
}
