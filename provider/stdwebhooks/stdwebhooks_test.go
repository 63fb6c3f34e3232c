package stdwebhooks_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stdwebhooks"
	"github.com/paygate/paygate/strictjson"
)

func TestParseSources(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  string
		want []stdwebhooks.Source
	}{
		{"empty", "", nil},
		{"blank", "  ", nil},
		{"one", "polar=" + secretA, []stdwebhooks.Source{{Name: "polar", Secrets: []string{secretA}}}},
		{"rotation groups by name, first-seen order",
			"polar=" + secretA + ",dodo=" + secretB + ",polar=" + secretC,
			[]stdwebhooks.Source{
				{Name: "polar", Secrets: []string{secretA, secretC}},
				{Name: "dodo", Secrets: []string{secretB}},
			}},
		{"blanks around entries, names and secrets",
			" polar = " + secretA + " ,\tdodo=" + secretB + "\n",
			[]stdwebhooks.Source{
				{Name: "polar", Secrets: []string{secretA}},
				{Name: "dodo", Secrets: []string{secretB}},
			}},
		{"empty entries skipped", ",polar=" + secretA + ",, ,", []stdwebhooks.Source{{Name: "polar", Secrets: []string{secretA}}}},
		{"padded secret keeps its '='", "svix=" + vectorSecret + ",pad=whsec_YQ==",
			[]stdwebhooks.Source{
				{Name: "svix", Secrets: []string{vectorSecret}},
				{Name: "pad", Secrets: []string{"whsec_YQ=="}},
			}},
		{"name rules: digits, '_' and '-', 63 bytes",
			"0=" + secretA + ",a_b-c=" + secretA + "," + strings.Repeat("x", 63) + "=" + secretA,
			[]stdwebhooks.Source{
				{Name: "0", Secrets: []string{secretA}},
				{Name: "a_b-c", Secrets: []string{secretA}},
				{Name: strings.Repeat("x", 63), Secrets: []string{secretA}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := stdwebhooks.ParseSources(tt.env)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			for _, src := range got {
				_, err := stdwebhooks.NewReceiver(src)
				require.NoError(t, err, "what ParseSources accepts, NewReceiver does")
			}
		})
	}
}

func TestParseSourcesRefuses(t *testing.T) {
	t.Parallel()
	// A key that would pass for a valid name, to check it is never shown.
	const bareKey = "mfkq9r8gkyqrtwjupd8ilpzio2lalasw"
	tests := []struct {
		name    string
		env     string
		want    error
		mention string // what the error must show, to find the entry
	}{
		{"no '='", "polar=" + secretA + "," + secretB, stdwebhooks.ErrInvalidSource, "entry 2"},
		{"empty name", "=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"upper case", "Polar=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"starts with '-'", "-polar=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"starts with '_'", "_polar=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"a dot", "polar.sh=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"a slash", "a/b=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"a blank inside", "po lar=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"non-ASCII", "pölar=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"64 bytes", strings.Repeat("x", 64) + "=" + secretA, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"reserved: stripe", "stripe=" + secretA, stdwebhooks.ErrInvalidSource, `"stripe"`},
		{"reserved: adyen", "polar=" + secretA + ",adyen=" + secretB, stdwebhooks.ErrInvalidSource, `"adyen"`},
		{"secret where the name goes", secretA + "=" + secretB, stdwebhooks.ErrInvalidSource, "entry 1"},
		{"bare key with padding, no name", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw==", stdwebhooks.ErrInvalidSource, "entry 1"},
		{"empty secret", "polar=", stdwebhooks.ErrInvalidSecret, `"polar"`},
		{"no whsec_ prefix", "polar=" + bareKey, stdwebhooks.ErrInvalidSecret, `"polar"`},
		{"not base64", "polar=whsec_not*base64", stdwebhooks.ErrInvalidSecret, `"polar"`},
		{"bad rotation secret", "polar=" + secretA + ",polar=whsec_" + bareKey + "!", stdwebhooks.ErrInvalidSecret, "entry 2"},
		{"blank inside the secret", "polar=whsec_MfKQ9r8GKYqr TwjUPD8ILPZIo2LaLaSw", stdwebhooks.ErrInvalidSecret, `"polar"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := stdwebhooks.ParseSources(tt.env)
			require.ErrorIs(t, err, tt.want)
			require.Nil(t, got)
			require.Contains(t, err.Error(), tt.mention)
			// No valid name here is long enough for requireNoLeak to look
			// for it; every other name and secret is.
			secrets := []string{tt.env, bareKey}
			for _, entry := range strings.Split(tt.env, ",") {
				name, secret, _ := strings.Cut(entry, "=")
				secrets = append(secrets, name, secret)
			}
			requireNoLeak(t, err.Error(), secrets...)
		})
	}
}

func TestNewReceiver(t *testing.T) {
	t.Parallel()
	r, err := stdwebhooks.NewReceiver(stdwebhooks.Source{Name: "polar", Secrets: []string{secretA}})
	require.NoError(t, err)
	require.Equal(t, "polar", r.Name())

	for name, src := range map[string]stdwebhooks.Source{
		"no secret":    {Name: "polar"},
		"bad name":     {Name: "Polar", Secrets: []string{secretA}},
		"reserved":     {Name: "stripe", Secrets: []string{secretA}},
		"empty name":   {Secrets: []string{secretA}},
		"bad secret":   {Name: "polar", Secrets: []string{secretA, "whsec_%%%"}},
		"Stripe's":     {Name: "polar", Secrets: []string{"whsec_test_current"}},
		"blank secret": {Name: "polar", Secrets: []string{" " + secretA}},
	} {
		_, err := stdwebhooks.NewReceiver(src)
		require.Error(t, err, name)
		require.True(t, isOneOf(err, stdwebhooks.ErrInvalidSource, stdwebhooks.ErrInvalidSecret), name)
		requireNoLeak(t, err.Error(), src.Secrets...)
	}
}

type bundle struct {
	receiver *stdwebhooks.Receiver
	now      time.Time
}

func setup(t *testing.T) bundle {
	t.Helper()
	r, err := stdwebhooks.NewReceiver(stdwebhooks.Source{Name: "polar", Secrets: []string{secretA, secretB}})
	require.NoError(t, err)
	return bundle{receiver: r, now: time.Unix(1_800_000_000, 0)}
}

// request is the headers a sender holding secret puts on body.
func request(t testing.TB, id string, at time.Time, body []byte, secret string) http.Header {
	t.Helper()
	h := http.Header{}
	h.Set(stdwebhooks.HeaderID, id)
	h.Set(stdwebhooks.HeaderTimestamp, unix(at))
	h.Set(stdwebhooks.HeaderSignature, sign(t, id, at, body, secret))
	return h
}

func TestReceive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, err := b.receiver.Receive(request(t, msgID, b.now, body, secretB), body, b.now.Add(42*time.Second))
	require.NoError(t, err)
	require.Equal(t, []provider.Event{{
		Provider: "polar",
		ID:       msgID,
		Type:     "payment.succeeded",
		Created:  b.now.UTC(),
		Payload:  body,
	}}, events)
	require.Equal(t, time.UTC, events[0].Created.Location())
}

func TestReceiveType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := strings.Repeat("t", provider.MaxIDLength)
	tests := []struct {
		body string
		want string
	}{
		{`{"type":"order.paid"}`, "order.paid"},
		{` { "data" : {"type":"nested"} , "type" : "subscription.created" } `, "subscription.created"},
		{`{"type":"\u006frder.paid"}`, "order.paid"},
		{`{"type":"` + long + `"}`, long},
		{`{"type":"` + long + `x"}`, ""},
		{`{"type":""}`, ""},
		{`{}`, ""},
		{`{"type":7}`, ""},
		{`{"type":null}`, ""},
		{`{"type":{"name":"x"}}`, ""},
		{`{"type":["x"]}`, ""},
		{`{"Type":"order.paid"}`, ""},
		{`{"event_type":"ping"}`, ""},
		{`{"data":{"type":"nested"}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.body[:min(len(tt.body), 40)], func(t *testing.T) {
			t.Parallel()
			raw := []byte(tt.body)
			events, err := b.receiver.Receive(request(t, msgID, b.now, raw, secretA), raw, b.now)
			require.NoError(t, err)
			require.Len(t, events, 1)
			require.Equal(t, tt.want, events[0].Type)
			require.Equal(t, raw, events[0].Payload, "the payload is the body, byte for byte")
		})
	}
}

// TestReceiveRefuses: what no Receiver may file. Every body here is signed
// by a configured secret, so the refusal is about its content; the same
// body unsigned fails on its signature first, before it is read.
func TestReceiveRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name string
		id   string
		at   time.Time
		body string
		also error // the strictjson sentinel wrapped too, if any
	}{
		{"duplicate keys", msgID, b.now, `{"type":"a","type":"b"}`, strictjson.ErrDuplicateKey},
		{"duplicate keys by escape", msgID, b.now, `{"id":"a","\u0069d":"b"}`, strictjson.ErrDuplicateKey},
		{"duplicate keys nested", msgID, b.now, `{"data":{"amount":1,"amount":9000}}`, strictjson.ErrDuplicateKey},
		{"invalid UTF-8", msgID, b.now, "{\"type\":\"a\xff\"}", strictjson.ErrInvalidUTF8},
		{"lone surrogate", msgID, b.now, `{"type":"\ud800"}`, strictjson.ErrInvalidUTF8},
		{"NUL escaped", msgID, b.now, `{"type":"a\u0000b"}`, strictjson.ErrNUL},
		{"NUL raw", msgID, b.now, "{\"type\":\"a\x00b\"}", strictjson.ErrSyntax},
		{"array", msgID, b.now, `[{"type":"a"}]`, strictjson.ErrInvalidValue},
		{"string", msgID, b.now, `"event"`, strictjson.ErrInvalidValue},
		{"number", msgID, b.now, `1`, strictjson.ErrInvalidValue},
		{"null", msgID, b.now, `null`, nil},
		{"empty", msgID, b.now, ``, strictjson.ErrSyntax},
		{"trailing data", msgID, b.now, `{"type":"a"}{"type":"b"}`, strictjson.ErrSyntax},
		{"too deep", msgID, b.now, `{"a":` + strings.Repeat("[", strictjson.MaxDepth+1) + strings.Repeat("]", strictjson.MaxDepth+1) + `}`, strictjson.ErrTooDeep},
		{"huge number", msgID, b.now, `{"amount":1e999999}`, strictjson.ErrNumberRange},
		{"id too long", strings.Repeat("m", provider.MaxIDLength+1), b.now, `{}`, nil},
		{"id with a control character", "msg_1\x1b[2J", b.now, `{}`, nil},
		{"id with DEL", "msg_1\x7f", b.now, `{}`, nil},
		{"id with a C1 control", "msg_1\u0085", b.now, `{}`, nil},
		{"id with a tab", "msg\t1", b.now, `{}`, nil},
		{"id not UTF-8", "msg_\xff", b.now, `{}`, nil},
		{"timestamp before 2000", msgID, time.Unix(strictjson.MinUnix-1, 0), `{}`, strictjson.ErrTimestampOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := []byte(tt.body)
			header := http.Header{}
			header.Set(stdwebhooks.HeaderID, tt.id)
			header.Set(stdwebhooks.HeaderTimestamp, unix(tt.at))
			header.Set(stdwebhooks.HeaderSignature, sign(t, tt.id, tt.at, raw, secretA))
			// A clock as wrong as the timestamp, so that the tolerance is
			// not what refuses it.
			events, err := b.receiver.Receive(header, raw, tt.at)
			require.ErrorIs(t, err, provider.ErrNotAnEvent)
			if tt.also != nil {
				require.ErrorIs(t, err, tt.also)
			}
			require.Nil(t, events)
			requireNoLeak(t, err.Error(), secretA, secretB, header.Get(stdwebhooks.HeaderSignature))

			header.Set(stdwebhooks.HeaderSignature, sign(t, tt.id, tt.at, raw, secretC))
			_, err = b.receiver.Receive(header, raw, tt.at)
			require.ErrorIs(t, err, provider.ErrInvalidSignature, "the signature is checked before the body is read")
			require.NotErrorIs(t, err, provider.ErrNotAnEvent)
		})
	}
}

func TestReceiveHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	valid := func() http.Header { return request(t, msgID, b.now, body, secretA) }
	tests := []struct {
		name   string
		header func() http.Header
		want   error
	}{
		{"lower-case keys as sent on the wire", func() http.Header {
			// Set canonicalises the keys as net/http does with what it
			// reads: Receive must look them up the same way.
			h := http.Header{}
			for k, v := range valid() {
				h.Set(strings.ToLower(k), v[0])
			}
			return h
		}, nil},
		{"no headers", func() http.Header { return http.Header{} }, provider.ErrMissingSignature},
		{"no webhook-id", func() http.Header { h := valid(); h.Del(stdwebhooks.HeaderID); return h }, provider.ErrMissingSignature},
		{"no webhook-timestamp", func() http.Header { h := valid(); h.Del(stdwebhooks.HeaderTimestamp); return h }, provider.ErrMissingSignature},
		{"no webhook-signature", func() http.Header { h := valid(); h.Del(stdwebhooks.HeaderSignature); return h }, provider.ErrMissingSignature},
		{"empty webhook-id", func() http.Header { h := valid(); h.Set(stdwebhooks.HeaderID, ""); return h }, provider.ErrMissingSignature},
		{"Svix's brand only", func() http.Header {
			h := http.Header{}
			for k, v := range valid() {
				h[strings.Replace(k, "Webhook-", "Svix-", 1)] = v
			}
			return h
		}, provider.ErrMissingSignature},
		{"webhook-id twice", func() http.Header { h := valid(); h.Add(stdwebhooks.HeaderID, "msg_other"); return h }, provider.ErrMalformedSignature},
		{"webhook-timestamp twice", func() http.Header { h := valid(); h.Add(stdwebhooks.HeaderTimestamp, unix(b.now)); return h }, provider.ErrMalformedSignature},
		{"webhook-signature twice", func() http.Header {
			h := valid()
			h.Add(stdwebhooks.HeaderSignature, h.Get(stdwebhooks.HeaderSignature))
			return h
		}, provider.ErrMalformedSignature},
		{"timestamp not an integer", func() http.Header { h := valid(); h.Set(stdwebhooks.HeaderTimestamp, "2027-01-15T08:00:00Z"); return h }, provider.ErrMalformedSignature},
		{"stale", func() http.Header { return request(t, msgID, b.now.Add(-301*time.Second), body, secretA) }, provider.ErrStaleTimestamp},
		{"future", func() http.Header { return request(t, msgID, b.now.Add(301*time.Second), body, secretA) }, provider.ErrFutureTimestamp},
		{"signed for another id", func() http.Header {
			h := request(t, "msg_other", b.now, body, secretA)
			h.Set(stdwebhooks.HeaderID, msgID)
			return h
		}, provider.ErrInvalidSignature},
		{"another source's secret", func() http.Header { return request(t, msgID, b.now, body, secretC) }, provider.ErrInvalidSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := tt.header()
			events, err := b.receiver.Receive(h, body, b.now)
			if tt.want == nil {
				require.NoError(t, err)
				require.Len(t, events, 1)
				return
			}
			require.ErrorIs(t, err, tt.want)
			require.Nil(t, events)
			requireNoLeak(t, err.Error(), secretA, secretB, string(body), h.Get(stdwebhooks.HeaderSignature))
		})
	}
}

func TestAcknowledge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, err := b.receiver.Receive(request(t, msgID, b.now, body, secretA), body, b.now)
	require.NoError(t, err)
	for _, dup := range []bool{false, true} {
		a := b.receiver.Acknowledge(events, []bool{dup})
		require.Equal(t, http.StatusOK, a.Status)
		require.Equal(t, "application/json", a.ContentType)
		var got map[string]any
		require.NoError(t, json.Unmarshal(a.Body, &got))
		require.Equal(t, map[string]any{"received": true, "duplicate": dup}, got)
	}
	require.JSONEq(t, `{"received":true,"duplicate":false}`, string(b.receiver.Acknowledge(events, []bool{false}).Body))
}

func TestEffects(t *testing.T) {
	t.Parallel()
	for _, payload := range []string{string(body), `{}`, `not json`, vectorPayload} {
		fx, err := stdwebhooks.Mapper.Effects([]byte(payload))
		require.ErrorIs(t, err, provider.ErrIgnored)
		require.NotErrorIs(t, err, provider.ErrPermanent)
		require.Zero(t, fx)
		require.NotContains(t, err.Error(), payload)
	}
}

func isOneOf(err error, targets ...error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
