package provider

import (
	"errors"
	"time"

	"github.com/shopspring/decimal"
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
