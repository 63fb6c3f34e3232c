package adyen_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/strictjson"
)

func TestDecodeItemReadsWhatReceiveStored(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	sent := signed(testKey, func(it *adyen.Item) {
		it.PspReference, it.OriginalReference, it.EventCode = "CAPT000000000001", "QFQTPCQ8HXSKGK82", "CAPTURE"
		it.Reason = ""
	})
	events, err := b.rc.Receive(http.Header{}, batchBody("false", itemJSON(t, sent)), now)
	require.NoError(t, err)

	it, err := adyen.DecodeItem(events[0].Payload)
	require.NoError(t, err)
	require.Equal(t, sent, it)
	require.Equal(t, events[0].ID, adyen.EventID(it))
	require.NoError(t, adyen.Verify(it, [][]byte{testKey}))
	created, err := it.EventTime()
	require.NoError(t, err)
	require.Equal(t, events[0].Created, created)
	require.Equal(t, int64(1999), *it.Amount.Value)
	require.Equal(t, "EUR", it.Amount.Currency)
	require.Equal(t, "034286", it.AdditionalData["authCode"])
}

func TestDecodeItemRefuses(t *testing.T) {
	t.Parallel()
	good := string(itemJSON(t, signed(testKey, nil)))
	_, err := adyen.DecodeItem([]byte(good))
	require.NoError(t, err)

	for _, tc := range []struct {
		name     string
		raw      string
		sentinel error
	}{
		{"empty", "", nil},
		{"null", "null", nil},
		{"an array", "[" + good + "]", nil},
		{"a wrapped item", `{"NotificationRequestItem":` + good + `}`, nil}, // no pspReference at its level
		{"duplicate key", strings.Replace(good, `"eventCode":`, `"eventCode":"REFUND","eventCode":`, 1), strictjson.ErrDuplicateKey},
		{"key case", strings.Replace(good, `"eventCode":`, `"EventCode":"REFUND","eventCode":`, 1), strictjson.ErrKeyCase},
		{"trailing data", good + "x", strictjson.ErrSyntax},
		{"bad success", strings.Replace(good, `"success":"true"`, `"success":"maybe"`, 1), nil},
		{"bad date", strings.Replace(good, `"eventDate":"2026-11-03T10:15:30+01:00"`, `"eventDate":"1969-12-31T23:59:59Z"`, 1), strictjson.ErrTimestampOutOfRange},
		{"no psp", strings.Replace(good, `"pspReference":"QFQTPCQ8HXSKGK82"`, `"pspReference":null`, 1), nil},
	} {
		_, err := adyen.DecodeItem([]byte(tc.raw))
		require.ErrorIs(t, err, provider.ErrNotAnEvent, tc.name)
		if tc.sentinel != nil {
			require.ErrorIs(t, err, tc.sentinel, tc.name)
		}
	}
}

func TestEventID(t *testing.T) {
	t.Parallel()
	it := baseItem()
	require.Equal(t, "QFQTPCQ8HXSKGK82:AUTHORISATION:true", adyen.EventID(it))

	// Adyen repeats an item with unsigned fields changed: the same event.
	again := it
	again.EventDate, again.Reason = "2026-11-04T08:00:00+01:00", "another reason"
	require.Equal(t, adyen.EventID(it), adyen.EventID(again))

	// A refusal and a success of one reference are two events; so are two
	// event codes of one reference (a dispute's CHARGEBACK and its
	// CHARGEBACK_REVERSED).
	refused := it
	refused.Success = "false"
	require.NotEqual(t, adyen.EventID(it), adyen.EventID(refused))
	reversed := it
	reversed.EventCode = "CHARGEBACK_REVERSED"
	require.NotEqual(t, adyen.EventID(it), adyen.EventID(reversed))
}

func TestEventTime(t *testing.T) {
	t.Parallel()
	it := baseItem()
	got, err := it.EventTime()
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 3, 9, 15, 30, 0, time.UTC), got)

	it.EventDate = "2026-11-03 10:15:30+01:00"
	_, err = it.EventTime()
	require.ErrorIs(t, err, provider.ErrNotAnEvent)
	require.NotContains(t, err.Error(), "2026", "the sender's text is not quoted")
}
