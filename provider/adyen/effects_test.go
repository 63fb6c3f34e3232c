package adyen_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/statemachine"
)

// item builds a stored notification item as Adyen sends it.
func item(code, psp, original string, value int64, currency string, success bool, extra map[string]any) []byte {
	it := map[string]any{
		"additionalData":      map[string]any{"hmacSignature": "not checked by the mapping"},
		"amount":              map[string]any{"value": value, "currency": currency},
		"eventCode":           code,
		"eventDate":           "2026-11-03T10:15:30+01:00",
		"merchantAccountCode": "PaygateTest",
		"merchantReference":   "order-1",
		"pspReference":        psp,
		"paymentMethod":       "visa",
		"reason":              "",
		"success":             fmt.Sprint(success),
	}
	if original != "" {
		it["originalReference"] = original
	}
	for k, v := range extra {
		it["additionalData"].(map[string]any)[k] = v
	}
	raw, err := json.Marshal(it)
	if err != nil {
		panic(err)
	}
	return raw
}

const (
	payPSP     = "AUTH000000000001"
	capturePSP = "CAPT000000000001"
	refundPSP  = "RFND000000000001"
	disputePSP = "DISP000000000001"
)

var eventAt = time.Date(2026, 11, 3, 9, 15, 30, 0, time.UTC)

type posting struct {
	ref, kind     string
	debit, credit ledger.Account
	amount        string
}

func TestEffectsOfEachCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		payload  []byte
		payment  string
		facts    []string // kind:object:amount
		postings []posting
		email    string
	}{
		{
			name:    "authorisation",
			payload: item("AUTHORISATION", payPSP, "", 36000, "EUR", true, map[string]any{"shopperEmail": "a@example.test"}),
			payment: payPSP,
			facts:   []string{"amount_known:" + payPSP + ":360.00", "authorized:" + payPSP + ":360.00"},
			email:   "a@example.test",
		},
		{
			name:    "authorisation refused",
			payload: item("AUTHORISATION", payPSP, "", 36000, "EUR", false, nil),
			payment: payPSP,
			facts:   []string{"payment_failed:" + payPSP + ":0"},
		},
		{
			name:     "capture",
			payload:  item("CAPTURE", capturePSP, payPSP, 36000, "EUR", true, nil),
			payment:  payPSP,
			facts:    []string{"captured:" + capturePSP + ":360.00"},
			postings: []posting{{"adyen:capture:" + capturePSP, "capture", ledger.AccountProviderBalance, ledger.AccountSales, "360.00"}},
		},
		{
			name:     "capture failed",
			payload:  item("CAPTURE_FAILED", capturePSP, payPSP, 36000, "EUR", true, nil),
			payment:  payPSP,
			facts:    []string{"capture_failed:" + capturePSP + ":360.00"},
			postings: []posting{{"adyen:capture:" + capturePSP + ":reversal", "adjustment", ledger.AccountSales, ledger.AccountProviderBalance, "360.00"}},
		},
		{
			name:    "cancellation",
			payload: item("CANCELLATION", "CNCL000000000001", payPSP, 36000, "EUR", true, nil),
			payment: payPSP,
			facts:   []string{"canceled:CNCL000000000001:0"},
		},
		{
			name:    "cancel or refund: cancelled",
			payload: item("CANCEL_OR_REFUND", "CNCL000000000001", payPSP, 36000, "EUR", true, map[string]any{"modification.action": "cancel"}),
			payment: payPSP,
			facts:   []string{"canceled:CNCL000000000001:0"},
		},
		{
			name:     "cancel or refund: refunded",
			payload:  item("CANCEL_OR_REFUND", refundPSP, payPSP, 36000, "EUR", true, map[string]any{"modification.action": "refund"}),
			payment:  payPSP,
			facts:    []string{"refund_succeeded:" + refundPSP + ":360.00"},
			postings: []posting{{"adyen:refund:" + refundPSP, "refund", ledger.AccountRefunds, ledger.AccountProviderBalance, "360.00"}},
		},
		{
			name:     "refund",
			payload:  item("REFUND", refundPSP, payPSP, 6000, "EUR", true, nil),
			payment:  payPSP,
			facts:    []string{"refund_succeeded:" + refundPSP + ":60.00"},
			postings: []posting{{"adyen:refund:" + refundPSP, "refund", ledger.AccountRefunds, ledger.AccountProviderBalance, "60.00"}},
		},
		{
			name:    "refund refused moves nothing",
			payload: item("REFUND", refundPSP, payPSP, 6000, "EUR", false, nil),
			payment: payPSP,
			facts:   []string{"refund_failed:" + refundPSP + ":60.00"},
		},
		{
			name:     "refund failed later",
			payload:  item("REFUND_FAILED", refundPSP, payPSP, 6000, "EUR", true, nil),
			payment:  payPSP,
			facts:    []string{"refund_failed:" + refundPSP + ":60.00"},
			postings: []posting{{"adyen:refund:" + refundPSP + ":reversal", "refund_reversal", ledger.AccountProviderBalance, ledger.AccountRefunds, "60.00"}},
		},
		{
			name:     "refunded reversed",
			payload:  item("REFUNDED_REVERSED", refundPSP, payPSP, 6000, "EUR", true, nil),
			payment:  payPSP,
			facts:    []string{"refund_failed:" + refundPSP + ":60.00"},
			postings: []posting{{"adyen:refund:" + refundPSP + ":reversal", "refund_reversal", ledger.AccountProviderBalance, ledger.AccountRefunds, "60.00"}},
		},
		{
			name:     "chargeback, pending",
			payload:  item("CHARGEBACK", disputePSP, payPSP, 36000, "EUR", true, map[string]any{"disputeStatus": "Undefended"}),
			payment:  payPSP,
			facts:    []string{"dispute_opened:" + disputePSP + ":0", "dispute_funds_withdrawn:" + disputePSP + ":360.00"},
			postings: []posting{{"adyen:dispute:" + disputePSP + ":chargeback", "dispute_withdrawal", ledger.AccountDisputeLosses, ledger.AccountProviderBalance, "360.00"}},
		},
		{
			name:    "chargeback, accepted",
			payload: item("CHARGEBACK", disputePSP, payPSP, 36000, "EUR", true, map[string]any{"disputeStatus": "Accepted"}),
			payment: payPSP,
			facts: []string{"dispute_opened:" + disputePSP + ":0", "dispute_funds_withdrawn:" + disputePSP + ":360.00",
				"dispute_closed_lost:" + disputePSP + ":0"},
			postings: []posting{{"adyen:dispute:" + disputePSP + ":chargeback", "dispute_withdrawal", ledger.AccountDisputeLosses, ledger.AccountProviderBalance, "360.00"}},
		},
		{
			name:    "chargeback reversed",
			payload: item("CHARGEBACK_REVERSED", disputePSP, payPSP, 36000, "EUR", true, map[string]any{"disputeStatus": "Won"}),
			payment: payPSP,
			facts: []string{"dispute_opened:" + disputePSP + ":0", "dispute_funds_reinstated:" + disputePSP + ":360.00",
				"dispute_closed_won:" + disputePSP + ":0"},
			postings: []posting{{"adyen:dispute:" + disputePSP + ":chargeback_reversed", "dispute_reinstatement", ledger.AccountProviderBalance, ledger.AccountDisputeLosses, "360.00"}},
		},
		{
			name:    "second chargeback",
			payload: item("SECOND_CHARGEBACK", disputePSP, payPSP, 36000, "EUR", true, map[string]any{"disputeStatus": "Lost"}),
			payment: payPSP,
			facts: []string{"dispute_opened:" + disputePSP + ":second:0", "dispute_funds_withdrawn:" + disputePSP + ":second:360.00",
				"dispute_closed_lost:" + disputePSP + ":second:0"},
			postings: []posting{{"adyen:dispute:" + disputePSP + ":second_chargeback", "dispute_withdrawal", ledger.AccountDisputeLosses, ledger.AccountProviderBalance, "360.00"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fx, err := adyen.Effects(tc.payload)
			require.NoError(t, err)
			require.Equal(t, tc.payment, fx.PaymentID)
			var facts []string
			for _, f := range fx.Facts {
				require.Equal(t, eventAt, f.At, "facts are dated at eventDate, in UTC")
				facts = append(facts, fmt.Sprintf("%s:%s:%s", f.Kind, f.ObjectID, f.Amount.StringFixed(-f.Amount.Exponent())))
			}
			require.Equal(t, tc.facts, facts)
			require.Len(t, fx.Postings, len(tc.postings))
			for i, want := range tc.postings {
				got := fx.Postings[i]
				require.Equal(t, want.ref, got.Ref)
				require.Equal(t, want.kind, string(got.Kind))
				require.Equal(t, "eur", got.Currency)
				require.Equal(t, tc.payment, got.PaymentID)
				require.Equal(t, eventAt, got.OccurredAt, "a movement is dated when Adyen booked it")
				require.Equal(t, []ledger.Entry{ledger.Debit(want.debit, got.Amount()), ledger.Credit(want.credit, got.Amount())}, got.Entries)
				require.Equal(t, want.amount, got.Amount().StringFixed(2))
				require.NoError(t, got.Validate())
			}
			require.Equal(t, tc.email, fx.ReceiptEmail)
			require.Equal(t, tc.email != "", fx.ReceiptEmailKnown)
		})
	}
}

// TestAdyenExponents: amounts are read with Adyen's own minor units, which
// differ from ISO 4217 (and from Stripe's) for CLP, CVE, IDR and ISK, and
// booked at the ledger's scale.
func TestAdyenExponents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value    int64
		currency string
		want     string
	}{
		{36000, "EUR", "360.00"},
		{150000, "CLP", "1500"},    // Adyen: 2 decimals; ISO and the ledger: none
		{500, "CVE", "500.00"},     // Adyen: none; ISO: 2
		{15000, "IDR", "15000.00"}, // Adyen: none; ISO: 2
		{123400, "ISK", "1234.00"}, // Adyen: 2; ISO: none
		{1500, "JPY", "1500"},
		{1234, "KWD", "1.234"},
		{1234, "BHD", "1.234"},
	} {
		fx, err := adyen.Effects(item("CAPTURE", capturePSP, payPSP, tc.value, tc.currency, true, nil))
		require.NoError(t, err, tc.currency)
		got := fx.Postings[0]
		exp, err := ledger.Exponent(got.Currency)
		require.NoError(t, err)
		require.Equal(t, -exp, got.Amount().Exponent(), "%s is booked at the ledger's scale", tc.currency)
		require.Equal(t, tc.want, got.Amount().StringFixed(exp), "%d %s", tc.value, tc.currency)
	}

	// 1000.50 CLP at Adyen is no amount the ledger (whole pesos) can hold:
	// poison, never rounded.
	_, err := adyen.Effects(item("CAPTURE", capturePSP, payPSP, 100050, "CLP", true, nil))
	require.ErrorIs(t, err, provider.ErrPermanent)
	require.ErrorIs(t, err, ledger.ErrInvalidAmount)
}

func TestEffectsIgnoredAndPermanent(t *testing.T) {
	t.Parallel()
	for name, payload := range map[string][]byte{
		"a code paygate does not map": item("REPORT_AVAILABLE", payPSP, "", 0, "EUR", true, nil),
		"notification of chargeback":  item("NOTIFICATION_OF_CHARGEBACK", disputePSP, payPSP, 100, "EUR", true, nil),
		"a refused capture":           item("CAPTURE", capturePSP, payPSP, 100, "EUR", false, nil),
		"a refused cancellation":      item("CANCELLATION", capturePSP, payPSP, 100, "EUR", false, nil),
		"a zero-value authorisation":  item("AUTHORISATION", payPSP, "", 0, "EUR", true, nil),
	} {
		_, err := adyen.Effects(payload)
		require.ErrorIs(t, err, provider.ErrIgnored, name)
		require.False(t, errors.Is(err, provider.ErrPermanent), name)
	}
	for name, tc := range map[string]struct {
		payload []byte
		target  error
	}{
		"a modification naming no payment": {item("REFUND", refundPSP, "", 100, "EUR", true, nil), provider.ErrPermanent},
		"an unknown currency":              {item("CAPTURE", capturePSP, payPSP, 100, "ZZZ", true, nil), ledger.ErrUnknownCurrency},
		"a negative amount":                {item("CAPTURE", capturePSP, payPSP, -100, "EUR", true, nil), ledger.ErrNegativeAmount},
		"a zero refund":                    {item("REFUND", refundPSP, payPSP, 0, "EUR", true, nil), statemachine.ErrMissingAmount},
		"cancel or refund without action":  {item("CANCEL_OR_REFUND", refundPSP, payPSP, 100, "EUR", true, nil), provider.ErrPermanent},
		"not an item":                      {[]byte(`{"eventCode":"CAPTURE"}`), provider.ErrNotAnEvent},
		"not JSON":                         {[]byte(`nope`), provider.ErrNotAnEvent},
	} {
		_, err := adyen.Effects(tc.payload)
		require.ErrorIs(t, err, provider.ErrPermanent, name)
		require.ErrorIs(t, err, tc.target, name)
	}
}

// TestFoldOfAdyenLifecycles: the facts of whole lifecycles, in every order,
// fold to the state and amounts the contract gives.
func TestFoldOfAdyenLifecycles(t *testing.T) {
	t.Parallel()
	auth := item("AUTHORISATION", payPSP, "", 10000, "EUR", true, nil)
	capture := item("CAPTURE", capturePSP, payPSP, 10000, "EUR", true, nil)
	for _, tc := range []struct {
		name                        string
		items                       [][]byte
		state                       statemachine.State
		captured, refunded, dispute string
	}{
		{"authorised", [][]byte{auth}, statemachine.StateRequiresCapture, "0.00", "0.00", "0.00"},
		{"captured", [][]byte{auth, capture}, statemachine.StateSucceeded, "100.00", "0.00", "0.00"},
		{"capture failed", [][]byte{auth, capture, item("CAPTURE_FAILED", capturePSP, payPSP, 10000, "EUR", true, nil)},
			statemachine.StateRequiresCapture, "0.00", "0.00", "0.00"},
		{"partly refunded", [][]byte{auth, capture, item("REFUND", refundPSP, payPSP, 2500, "EUR", true, nil)},
			statemachine.StatePartiallyRefunded, "100.00", "25.00", "0.00"},
		{"refund failed after succeeding", [][]byte{auth, capture, item("REFUND", refundPSP, payPSP, 2500, "EUR", true, nil),
			item("REFUND_FAILED", refundPSP, payPSP, 2500, "EUR", true, nil)}, statemachine.StateSucceeded, "100.00", "0.00", "0.00"},
		{"cancelled", [][]byte{auth, item("CANCELLATION", "CNCL000000000001", payPSP, 10000, "EUR", true, nil)},
			statemachine.StateCanceled, "0.00", "0.00", "0.00"},
		{"charged back", [][]byte{auth, capture, item("CHARGEBACK", disputePSP, payPSP, 10000, "EUR", true, nil)},
			statemachine.StateDisputed, "100.00", "0.00", "100.00"},
		{"chargeback reversed", [][]byte{auth, capture, item("CHARGEBACK", disputePSP, payPSP, 10000, "EUR", true, nil),
			item("CHARGEBACK_REVERSED", disputePSP, payPSP, 10000, "EUR", true, nil)}, statemachine.StateSucceeded, "100.00", "0.00", "0.00"},
		{"second chargeback", [][]byte{auth, capture, item("CHARGEBACK", disputePSP, payPSP, 10000, "EUR", true, nil),
			item("CHARGEBACK_REVERSED", disputePSP, payPSP, 10000, "EUR", true, nil),
			item("SECOND_CHARGEBACK", disputePSP, payPSP, 10000, "EUR", true, nil)}, statemachine.StateDisputeLost, "100.00", "0.00", "100.00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var facts []statemachine.Fact
			for _, raw := range tc.items {
				fx, err := adyen.Effects(raw)
				require.NoError(t, err)
				facts = append(facts, fx.Facts...)
			}
			for seed := range uint64(20) {
				perm := shuffled(facts, seed)
				s := statemachine.Fold(perm)
				require.Equal(t, tc.state, s.State)
				require.Equal(t, tc.captured, s.AmountCaptured.StringFixed(2))
				require.Equal(t, tc.refunded, s.AmountRefunded.StringFixed(2))
				require.Equal(t, tc.dispute, s.AmountDisputed.StringFixed(2))
			}
		})
	}
}

func shuffled(facts []statemachine.Fact, seed uint64) []statemachine.Fact {
	out := append([]statemachine.Fact(nil), facts...)
	rand.New(rand.NewPCG(seed, 1)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
