// Package adyen is paygate's Adyen adapter. It owns Adyen's standard
// webhooks (the classic notifications): a batch of notification items, each
// signed on its own with an HMAC over a handful of its fields, optionally
// behind Basic auth, and answered "[accepted]"; how an item is decoded,
// named (its event id) and verified; and how items map to facts.
//
// An item's HMAC covers only the fields of SigningString. Everything else
// in an item (eventDate, reason, additionalData) and the batch's live flag
// is unauthenticated: anyone holding one signed item can resend it with
// those changed, which is why Basic auth should be configured in front.
//
// It also owns the two calls paygate makes to Adyen: a refund through the
// Checkout API (API.Refund), and the download of a report a
// REPORT_AVAILABLE notification announces (ReportClient); and how a
// settlement details report is read for reconciliation (Settlements).
// Everything else in it is pure.
//
// It must never know the inbox's tables or another provider, and nothing
// but API and ReportClient does I/O.
package adyen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/strictjson"
)

// Item is one NotificationRequestItem, with the fields paygate reads under
// Adyen's exact JSON names; other fields are kept only in the raw payload.
type Item struct {
	AdditionalData map[string]any `json:"additionalData"`
	Amount         struct {
		// Value is nil when the item has no amount: Adyen then signs an
		// empty value, not 0.
		Value    *int64 `json:"value"`
		Currency string `json:"currency"`
	} `json:"amount"`
	EventCode           string `json:"eventCode"`
	EventDate           string `json:"eventDate"`
	MerchantAccountCode string `json:"merchantAccountCode"`
	MerchantReference   string `json:"merchantReference"`
	OriginalReference   string `json:"originalReference"`
	PaymentMethod       string `json:"paymentMethod"`
	PspReference        string `json:"pspReference"`
	Reason              string `json:"reason"`
	Success             string `json:"success"`
}

// DecodeItem reads raw, the bytes of one NotificationRequestItem object as
// received (and as the inbox stores them), strictly: the bytes must read
// the same to every reader (strictjson), and the item must be of the shape
// Receive accepts (see Validate). It does not check the HMAC: Receive did,
// before the item was stored.
//
// It fails with an error wrapping provider.ErrNotAnEvent, and also the
// strictjson sentinel when the bytes are the problem, or
// strictjson.ErrTimestampOutOfRange for an eventDate outside its window.
func DecodeItem(raw []byte) (Item, error) {
	it, err := decodeItemJSON(raw)
	if err != nil {
		return Item{}, err
	}
	if err := it.Validate(); err != nil {
		return Item{}, err
	}
	return it, nil
}

func decodeItemJSON(raw []byte) (Item, error) {
	if !rawIsObject(raw) {
		return Item{}, fmt.Errorf("%w: the item is not an object", provider.ErrNotAnEvent)
	}
	var it Item
	if err := strictjson.Unmarshal(raw, &it); err != nil {
		return Item{}, fmt.Errorf("%w: %w", provider.ErrNotAnEvent, err)
	}
	return it, nil
}

// Validate checks what Receive requires of an authenticated item:
// pspReference and eventCode present, short enough for an event id and
// free of ':'; originalReference and merchantAccountCode free of ':';
// amount.currency empty or three capital letters; success "true" or
// "false"; eventDate an ISO 8601 time with an offset inside strictjson's
// window.
//
// The colon rules are what make the signing string unambiguous: Adyen
// joins the signed fields with ':' and escapes nothing, so with colons
// allowed anywhere a signature over "A:B:C" would also sign the item whose
// fields are split differently (a merchantReference "x:5" with amount 1000
// signs like a merchantReference "x" with amount 5 and currency "1000:EUR").
// Only merchantReference, the merchant's own text, may hold ':' (Adyen's
// libraries test with one); the value is an integer and the currency is
// letters, so the fields can then be split back only one way.
//
// It fails with an error wrapping provider.ErrNotAnEvent (and
// strictjson.ErrTimestampOutOfRange for a date outside the window). Errors
// name the field, never its value.
func (it Item) Validate() error {
	for _, f := range []struct{ name, v string }{{"pspReference", it.PspReference}, {"eventCode", it.EventCode}} {
		switch {
		case f.v == "":
			return fmt.Errorf("%w: %s is missing", provider.ErrNotAnEvent, f.name)
		case len(f.v) > provider.MaxIDLength:
			return fmt.Errorf("%w: %s is longer than %d bytes", provider.ErrNotAnEvent, f.name, provider.MaxIDLength)
		}
	}
	for _, f := range []struct{ name, v string }{
		{"pspReference", it.PspReference}, {"eventCode", it.EventCode},
		{"originalReference", it.OriginalReference}, {"merchantAccountCode", it.MerchantAccountCode},
	} {
		// strictjson already refuses NUL; ':' would make the event id and
		// the signing string ambiguous.
		if strings.ContainsAny(f.v, ":\x00") {
			return fmt.Errorf("%w: %s holds ':' or NUL", provider.ErrNotAnEvent, f.name)
		}
	}
	if len(it.OriginalReference) > provider.MaxIDLength {
		return fmt.Errorf("%w: originalReference is longer than %d bytes", provider.ErrNotAnEvent, provider.MaxIDLength)
	}
	if c := it.Amount.Currency; c != "" && !currencyShapeOK(c) {
		return fmt.Errorf("%w: amount.currency is not three capital letters", provider.ErrNotAnEvent)
	}
	if it.Success != "true" && it.Success != "false" {
		return fmt.Errorf("%w: success is not \"true\" or \"false\"", provider.ErrNotAnEvent)
	}
	if len(EventID(it)) > provider.MaxIDLength {
		return fmt.Errorf("%w: the event id would be longer than %d bytes", provider.ErrNotAnEvent, provider.MaxIDLength)
	}
	if _, err := it.EventTime(); err != nil {
		return err
	}
	return nil
}

// EventTime is the item's eventDate, in UTC.
//
// It fails with an error wrapping provider.ErrNotAnEvent when eventDate is
// missing or not an ISO 8601 (RFC 3339) time with an offset, and also
// strictjson.ErrTimestampOutOfRange when it is outside 2000..2100: a date
// there is unstorable or one no ledger transaction may carry.
func (it Item) EventTime() (time.Time, error) {
	if it.EventDate == "" {
		return time.Time{}, fmt.Errorf("%w: eventDate is missing", provider.ErrNotAnEvent)
	}
	// The parse error would quote the sender's text; say what was wrong
	// instead.
	t, err := time.Parse(time.RFC3339, it.EventDate)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: eventDate is not an ISO 8601 time with an offset", provider.ErrNotAnEvent)
	}
	if _, err := strictjson.ValidUnix(t.Unix()); err != nil {
		return time.Time{}, fmt.Errorf("%w: eventDate: %w", provider.ErrNotAnEvent, strictjson.ErrTimestampOutOfRange)
	}
	return t.UTC(), nil
}

// EventID is the inbox's dedupe key of an item:
// "<pspReference>:<eventCode>:<success>". Adyen repeats an item with the
// same eventCode and pspReference (unique across Adyen) with other fields
// changed, so those name the event. The outcome is part of the name: one
// reference can be reported failed and later successful, and those are
// two events, not a repeat.
func EventID(it Item) string {
	return it.PspReference + ":" + it.EventCode + ":" + it.Success
}

// SigningString is the text Adyen's HMAC signs: pspReference,
// originalReference, merchantAccountCode, merchantReference, amount.value,
// amount.currency, eventCode and success joined with ':', an absent field
// as the empty string, nothing escaped.
func (it Item) SigningString() string {
	value := ""
	if it.Amount.Value != nil {
		value = strconv.FormatInt(*it.Amount.Value, 10)
	}
	return strings.Join([]string{
		it.PspReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		value, it.Amount.Currency, it.EventCode, it.Success,
	}, ":")
}

func currencyShapeOK(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := range len(c) {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

func rawIsObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}
