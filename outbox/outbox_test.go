package outbox_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/outbox"
)

// TestIDIsDerivedFromTheChange: the id of a change is the same however
// often it is computed (a retried transaction, an event applied twice, a
// resend), and differs for any other object or change of it.
func TestIDIsDerivedFromTheChange(t *testing.T) {
	t.Parallel()
	require.Equal(t, outbox.ID(outbox.AggregatePayment, "pi_1", 1), outbox.ID(outbox.AggregatePayment, "pi_1", 1))
	require.Regexp(t, `^msg_[a-z2-7]{26}$`, outbox.ID(outbox.AggregatePayment, "pi_1", 1))
	// Changes whose parts would read the same run together.
	require.NotEqual(t, outbox.ID(outbox.AggregatePayment, "pi_1", 11), outbox.ID(outbox.AggregatePayment, "pi_11", 1))
	require.NotEqual(t, outbox.ID(outbox.AggregateReconciliationRun, "1", 2), outbox.ID(outbox.AggregateReconciliationRun, "12", 1))
	require.NotEqual(t, outbox.ID(outbox.AggregatePayment, "rr_1", 1), outbox.ID(outbox.AggregateRefundRequest, "rr_1", 1))

	rapid.Check(t, func(t *rapid.T) {
		aggregates := rapid.SampledFrom([]outbox.AggregateType{
			outbox.AggregatePayment, outbox.AggregateRefundRequest, outbox.AggregateReconciliationRun,
		})
		// Ids that share prefixes and digits, so that a derivation that
		// concatenates without a separator would collide.
		ids := rapid.StringMatching(`(pi_)?1{0,3}`)
		seqs := rapid.Int64Range(1, 111)
		aggA, idA, seqA := aggregates.Draw(t, "aggregate_a"), ids.Draw(t, "id_a"), seqs.Draw(t, "seq_a")
		aggB, idB, seqB := aggregates.Draw(t, "aggregate_b"), ids.Draw(t, "id_b"), seqs.Draw(t, "seq_b")
		a, b := outbox.ID(aggA, idA, seqA), outbox.ID(aggB, idB, seqB)
		same := aggA == aggB && idA == idB && seqA == seqB
		require.Equal(t, same, a == b, "ID(%s, %q, %d) = %s, ID(%s, %q, %d) = %s", aggA, idA, seqA, a, aggB, idB, seqB, b)
	})
}

// TestNewBody: a message's bytes are the envelope, its fields in the
// documented order and nothing else, created_at at PostgreSQL's precision
// in UTC (so the body says what the row says), and its id derived from the
// change.
func TestNewBody(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CET", 3600)
	at := time.Date(2026, 3, 2, 10, 0, 0, 123_456_789, paris)
	m, err := outbox.New(outbox.AggregatePayment, "pi_1", 3, "payment.succeeded", at,
		map[string]any{"payment": map[string]string{"id": "pi_1"}})
	require.NoError(t, err)

	wantAt := time.Date(2026, 3, 2, 9, 0, 0, 123_456_000, time.UTC)
	require.Equal(t, outbox.ID(outbox.AggregatePayment, "pi_1", 3), m.ID)
	require.Equal(t, "payment.succeeded", m.Type)
	require.Equal(t, int64(3), m.Sequence)
	require.Equal(t, outbox.AggregatePayment, m.AggregateType)
	require.Equal(t, "pi_1", m.AggregateID)
	require.Equal(t, wantAt, m.CreatedAt)
	require.Equal(t, time.UTC, m.CreatedAt.Location())
	require.Zero(t, m.Position, "placed only after commit")

	require.Equal(t, []string{"id", "type", "created_at", "sequence", "data"}, topLevelKeys(t, m.Body))
	require.JSONEq(t, fmt.Sprintf(`{"id":%q,"type":"payment.succeeded","created_at":"2026-03-02T09:00:00.123456Z",
		"sequence":3,"data":{"payment":{"id":"pi_1"}}}`, m.ID), string(m.Body))
	require.Contains(t, string(m.Body), `"created_at":"2026-03-02T09:00:00.123456Z"`)

	for _, seq := range []int64{0, -1} {
		_, err := outbox.New(outbox.AggregatePayment, "pi_1", seq, "payment.succeeded", at, nil)
		require.ErrorContains(t, err, "sequence must be positive", "sequence %d", seq)
	}
	_, err = outbox.New(outbox.AggregatePayment, "pi_1", 1, "payment.succeeded", at, map[string]any{"x": func() {}})
	require.Error(t, err, "data that cannot be encoded")
}

// topLevelKeys lists the keys of a JSON object in the order they appear,
// refusing a repeated key.
func topLevelKeys(t *testing.T, body []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		key := tok.(string)
		require.NotContains(t, keys, key, "key repeated")
		keys = append(keys, key)
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	return keys
}

// TestParseCursor: only cursors the feed hands out are read back, each to
// its position; anything else is ErrInvalidCursor, never a guess.
func TestParseCursor(t *testing.T) {
	t.Parallel()
	p, err := outbox.ParseCursor("")
	require.NoError(t, err)
	require.Zero(t, p, "no cursor is the beginning")

	for _, junk := range []string{
		"pos_-1", "pos_01", "pos_00", "abc", "pos_", "pos_+1", "pos_ 1", "pos_1 ", "POS_1", "1", "pos_1.0",
		"pos_9223372036854775808", "pos_0x10", "pos_１",
	} {
		_, err := outbox.ParseCursor(junk)
		require.ErrorIs(t, err, outbox.ErrInvalidCursor, "%q", junk)
	}

	rapid.Check(t, func(t *rapid.T) {
		pos := rapid.Int64Min(0).Draw(t, "position")
		c := outbox.Cursor(pos)
		require.True(t, strings.HasPrefix(c, "pos_"), c)
		got, err := outbox.ParseCursor(c)
		require.NoError(t, err, c)
		require.Equal(t, pos, got, c)
	})
}
