package provider

import (
	"errors"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
)

// BalanceTransaction is a provider's record of one movement of its
// balance, as reconciliation reads it. Amount is gross and signed (negative
// leaves the balance), Fee positive when charged (negative when refunded),
// both in the currency's minor unit.
type BalanceTransaction struct {
	ID                string
	Type              string
	ReportingCategory string
	SourceID          string
	Currency          string
	Amount            int64
	Fee               int64
	Net               int64
	Created           time.Time
	// ExchangeRate is the provider's rate when it converted the movement
	// from its presentment currency into Currency, the balance's (major
	// units of Currency per major unit of the other); not Valid when no
	// conversion took place.
	ExchangeRate decimal.NullDecimal
}

// ListedEvent is one provider event as its list endpoint returned it.
// Payload is the event's JSON as it appeared in the listed page: the same
// object the provider signs and delivers, not necessarily the same bytes
// (whitespace).
type ListedEvent struct {
	ID      string
	Type    string
	Created time.Time
	Payload []byte
}

// Errors of a provider's API client.
var (
	// ErrAPI: the provider's API failed; the call can be retried.
	ErrAPI = errors.New("provider API")
	// ErrAPIRefused: the provider refused a request as invalid (with
	// ErrAPI): retrying it cannot help.
	ErrAPIRefused = errors.New("request refused")
)

// StatementLine is one thing a record of a provider's statement asks of
// the ledger: its movement, or its fee. The provider derives it from the
// record alone, naming the ledger ref the worker posts the same movement
// under, so reconciliation needs no knowledge of the provider to match it.
type StatementLine struct {
	// Ref is the ledger ref of the movement; empty when the record's type
	// maps to nothing paygate posts.
	Ref string
	// Kind is the kind the ledger should have posted under Ref.
	Kind ledger.Kind
	// Post marks a line the ledger learns from the statement alone (a fee,
	// a settlement batch's payout): reconciliation posts it when the ledger
	// lacks it.
	Post bool
	// Type is the record's type as the provider names it, or "fee" for the
	// fee line of a record.
	Type string
	// Amount is the line's effect on the provider balance in the currency's
	// minor unit (the ledger's exponent), signed as the provider signs it.
	Amount int64
	// FeeColumn is the record's fee for the provider_fee column; nil on fee
	// lines, so that the column never counts a fee twice.
	FeeColumn *int64
	// Conversion, when set, is the prefix of the refs of the conversion's
	// legs should the record have settled in another currency than the
	// ledger posted the movement in: a leg's ref is the prefix followed by
	// its currency (see ledger.NewSettlement).
	Conversion string
}

// StatementRecord is one record of a statement the provider reads whole
// (a settlement batch's report) with the lines it derived from it.
type StatementRecord struct {
	BalanceTransaction
	Lines []StatementLine
}
