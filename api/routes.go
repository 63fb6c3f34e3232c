package api

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/statemachine"
)

// routes mounts the /v1 routes that read the payments and the ledger.
func (s *Server) routes(v1 *echo.Group) {
	anyRole := requireRole(RoleOps, RoleFinance)
	v1.GET("/payments", s.listPayments, anyRole)
	v1.GET("/payments/:payment_id", s.getPayment, anyRole)
	v1.GET("/payments/:payment_id/ledger", s.getPaymentLedger, anyRole)
	v1.GET("/ledger/trial-balance", s.trialBalance, anyRole)
	s.booksRoutes(v1)
	s.reconciliationRoutes(v1)
}

// PaymentAmounts is what every view of a payment shows first: who, where
// it stands, and its amounts as decimal strings in the currency's major
// unit.
type PaymentAmounts struct {
	ID             string             `json:"id"`
	Provider       string             `json:"provider"`
	Status         statemachine.State `json:"status"`
	Currency       string             `json:"currency"`
	Amount         string             `json:"amount"`
	AmountCaptured string             `json:"amount_captured"`
	AmountRefunded string             `json:"amount_refunded"`
	AmountDisputed string             `json:"amount_disputed"`
}

func paymentAmounts(p ledger.Payment) PaymentAmounts {
	return PaymentAmounts{
		ID: p.ID, Provider: p.Provider, Status: p.State, Currency: p.Currency,
		Amount:         amount(p.Amount, p.Currency),
		AmountCaptured: amount(p.AmountCaptured, p.Currency),
		AmountRefunded: amount(p.AmountRefunded, p.Currency),
		AmountDisputed: amount(p.AmountDisputed, p.Currency),
	}
}

// PaymentDetails are the merchant's own words about a payment, as its
// provider's events carried them: null (metadata: {}) until one did.
type PaymentDetails struct {
	Reference   *string           `json:"reference"`
	Customer    *string           `json:"customer"`
	Description *string           `json:"description"`
	Metadata    map[string]string `json:"metadata"`
}

func paymentDetails(p ledger.Payment) PaymentDetails {
	d := PaymentDetails{Reference: nullable(p.Details.Reference), Customer: nullable(p.Details.Customer),
		Description: nullable(p.Details.Description), Metadata: p.Details.Metadata}
	if d.Metadata == nil {
		d.Metadata = map[string]string{}
	}
	return d
}

// PaymentView is a payment as GET /v1/payments/{payment_id} shows it.
type PaymentView struct {
	PaymentAmounts
	PaymentDetails
	History []HistoryView      `json:"history"`
	Emails  []jobs.EmailRecord `json:"emails"` // each email intent and where it stands
}

// PaymentSummaryView is a payment as GET /v1/payments lists it: PaymentView
// without its history and emails (GET /v1/payments/{payment_id} has them),
// with when paygate first saw it and last changed it.
type PaymentSummaryView struct {
	PaymentAmounts
	PaymentDetails
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PaymentPage is the body of GET /v1/payments.
type PaymentPage struct {
	Payments   []PaymentSummaryView `json:"payments"`
	NextCursor *string              `json:"next_cursor"`
}

// paymentStatuses are the values of ?status= on GET /v1/payments.
var paymentStatuses = []statemachine.State{
	statemachine.StateProcessing, statemachine.StateRequiresCapture, statemachine.StateSucceeded,
	statemachine.StateCanceled, statemachine.StateFailed, statemachine.StatePartiallyRefunded,
	statemachine.StateRefunded, statemachine.StateDisputed, statemachine.StateDisputeLost,
}

// maxSearchLen bounds ?reference=, ?customer= and ?q= on GET
// /v1/payments: no payment keeps a longer reference or customer
// (statemachine.Reported cuts them), so a longer one finds nothing and is
// a client's mistake.
const maxSearchLen = statemachine.MaxDetailLen

func (s *Server) listPayments(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	f := ledger.PaymentFilter{Status: statemachine.State(c.QueryParam("status")), Currency: c.QueryParam("currency"),
		Reference: c.QueryParam("reference"), Customer: c.QueryParam("customer"),
		// A search box's term: the spaces around a pasted id are not
		// part of it.
		Q: strings.TrimSpace(c.QueryParam("q")),
		// Finance reconciles money, not customers: it neither sees a
		// receipt address unmasked nor finds payments by one.
		QEmail: callerOf(c).Roles[RoleOps],
	}
	for _, p := range [][2]string{{"reference", f.Reference}, {"customer", f.Customer}, {"q", f.Q}} {
		if utf8.RuneCountInString(p[1]) > maxSearchLen {
			return badRequest("%s must be at most %d characters", p[0], maxSearchLen)
		}
	}
	if f.Status != "" && !slices.Contains(paymentStatuses, f.Status) {
		return badRequest("status must be one of processing, requires_capture, succeeded, canceled, failed, " +
			"partially_refunded, refunded, disputed, dispute_lost")
	}
	if f.Currency != "" && !currencyCode.MatchString(f.Currency) {
		return badRequest("currency must be a lowercase ISO 4217 code such as usd")
	}
	payments, next, err := ledger.ListPayments(c.Request().Context(), s.config.Pool, f, page.Cursor, page.Limit)
	if err != nil {
		return cursorErr(err)
	}
	out := PaymentPage{Payments: make([]PaymentSummaryView, 0, len(payments)), NextCursor: nullable(next)}
	for _, p := range payments {
		out.Payments = append(out.Payments, PaymentSummaryView{
			PaymentAmounts: paymentAmounts(p), PaymentDetails: paymentDetails(p),
			CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
		})
	}
	return writeJSON(c, http.StatusOK, out)
}

var currencyCode = regexp.MustCompile(`^[a-z]{3}$`)

// HistoryView is one change of a payment's state.
type HistoryView struct {
	From    *statemachine.State `json:"from"`
	To      statemachine.State  `json:"to"`
	EventID string              `json:"event_id"`
	At      time.Time           `json:"at"`
}

func (s *Server) getPayment(c echo.Context) error {
	ctx := c.Request().Context()
	p, err := ledger.GetPayment(ctx, s.config.Pool, c.Param("payment_id"))
	if err != nil {
		return err
	}
	history, err := ledger.History(ctx, s.config.Pool, p.ID)
	if err != nil {
		return err
	}
	v := PaymentView{PaymentAmounts: paymentAmounts(p), PaymentDetails: paymentDetails(p), History: make([]HistoryView, 0, len(history))}
	for _, h := range history {
		hv := HistoryView{To: h.To, EventID: h.EventID, At: h.At.UTC()}
		if h.From != "" {
			from := h.From
			hv.From = &from
		}
		v.History = append(v.History, hv)
	}
	if v.Emails, err = jobs.EmailsForPayment(ctx, s.config.Pool, p.ID); err != nil {
		return err
	}
	if !callerOf(c).Roles[RoleOps] {
		// Finance reconciles money, not customers: the address is
		// masked, whether the email is sent or not.
		for i := range v.Emails {
			v.Emails[i].Recipient = maskEmail(v.Emails[i].Recipient)
		}
	}
	return writeJSON(c, http.StatusOK, v)
}

// maskEmail keeps an address's first character and its domain:
// "buyer@example.com" is "b•••@example.com". What is not an address is
// masked whole.
func maskEmail(addr string) string {
	if addr == "" {
		return ""
	}
	local, domain, ok := strings.Cut(addr, "@")
	if !ok || local == "" {
		return "•••"
	}
	return string([]rune(local)[:1]) + "•••@" + domain
}

// amount formats a decimal at its currency's scale ("360.00", "1000",
// "1.234"); a payment seen without a currency yet shows its plain value.
func amount(d decimal.Decimal, currency string) string {
	if currency == "" {
		return d.String()
	}
	return ledger.Format(d, currency)
}

// TransactionView is one ledger transaction.
type TransactionView struct {
	Ref        string      `json:"ref"`
	Kind       ledger.Kind `json:"kind"`
	Currency   string      `json:"currency"`
	OccurredAt time.Time   `json:"occurred_at"`
	// PostedAt is when the transaction counts in the books: OccurredAt,
	// or the first instant of the first open period when it occurred in
	// a period closed by the time it was posted.
	PostedAt time.Time `json:"posted_at"`
	// ExchangeRate is the provider's rate on a leg of a conversion into
	// the settlement currency; absent elsewhere.
	ExchangeRate *string     `json:"exchange_rate,omitempty"`
	Entries      []EntryView `json:"entries"`
}

// EntryView is one line of a transaction, "0" on its empty side.
type EntryView struct {
	Account ledger.Account `json:"account"`
	Debit   string         `json:"debit"`
	Credit  string         `json:"credit"`
}

func side(d decimal.Decimal, currency string) string {
	if d.IsZero() {
		return "0"
	}
	return ledger.Format(d, currency)
}

func (s *Server) getPaymentLedger(c echo.Context) error {
	ctx := c.Request().Context()
	id := c.Param("payment_id")
	if _, err := ledger.GetPayment(ctx, s.config.Pool, id); err != nil {
		return err
	}
	txs, err := ledger.TransactionsForPayment(ctx, s.config.Pool, id)
	if err != nil {
		return err
	}
	out := make([]TransactionView, 0, len(txs))
	for _, t := range txs {
		tv := TransactionView{Ref: t.Ref, Kind: t.Kind, Currency: t.Currency, OccurredAt: t.OccurredAt.UTC(), PostedAt: t.PostedAt.UTC()}
		if t.ExchangeRate.Valid {
			rate := t.ExchangeRate.Decimal.String()
			tv.ExchangeRate = &rate
		}
		for _, e := range t.Entries {
			tv.Entries = append(tv.Entries, EntryView{Account: e.Account, Debit: side(e.Debit, t.Currency), Credit: side(e.Credit, t.Currency)})
		}
		out = append(out, tv)
	}
	return writeJSON(c, http.StatusOK, map[string]any{"transactions": out})
}

// TrialBalanceView is the trial balance as the API shows it.
type TrialBalanceView struct {
	// AsOf is the instant the balance sums the transactions posted up to
	// (inclusive); absent for the whole ledger.
	AsOf       *time.Time           `json:"as_of,omitempty"`
	Currencies []CurrencyTotalView  `json:"currencies"`
	Accounts   []AccountBalanceView `json:"accounts"`
}

// CurrencyTotalView is one currency's totals.
type CurrencyTotalView struct {
	Currency string `json:"currency"`
	Debits   string `json:"debits"`
	Credits  string `json:"credits"`
	Balanced bool   `json:"balanced"`
}

// AccountBalanceView is one account's totals in one currency.
type AccountBalanceView struct {
	Account  ledger.Account `json:"account"`
	Currency string         `json:"currency"`
	Debits   string         `json:"debits"`
	Credits  string         `json:"credits"`
	Balance  string         `json:"balance"`
}

// trialBalance answers the whole ledger's trial balance, or with
// ?as_of=<RFC 3339> the transactions posted up to that instant.
func (s *Server) trialBalance(c echo.Context) error {
	ctx := c.Request().Context()
	raw := c.QueryParam("as_of")
	if raw == "" {
		tb, err := ledger.TrialBalanceNow(ctx, s.config.Pool)
		if err != nil {
			return err
		}
		return writeJSON(c, http.StatusOK, trialBalanceView(tb))
	}
	asOf, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return badRequest("as_of must be an RFC 3339 instant such as 2026-03-31T23:59:59Z; got %q", raw)
	}
	tb, err := ledger.TrialBalanceAsOf(ctx, s.config.Pool, asOf)
	if err != nil {
		return err
	}
	v := trialBalanceView(tb)
	at := asOf.UTC()
	v.AsOf = &at
	return writeJSON(c, http.StatusOK, v)
}

func trialBalanceView(tb ledger.TrialBalanceReport) TrialBalanceView {
	v := TrialBalanceView{Currencies: []CurrencyTotalView{}, Accounts: []AccountBalanceView{}}
	for _, ct := range tb.Currencies {
		v.Currencies = append(v.Currencies, CurrencyTotalView{Currency: ct.Currency,
			Debits: ledger.Format(ct.Debits, ct.Currency), Credits: ledger.Format(ct.Credits, ct.Currency), Balanced: ct.Balanced})
	}
	for _, a := range tb.Accounts {
		v.Accounts = append(v.Accounts, AccountBalanceView{Account: a.Account, Currency: a.Currency,
			Debits: ledger.Format(a.Debits, a.Currency), Credits: ledger.Format(a.Credits, a.Currency),
			Balance: ledger.Format(a.Balance, a.Currency)})
	}
	return v
}
