package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
)

// booksRoutes mounts finance's books: periods and their closes, and the
// journal exports. Ops and finance read the periods; closes and exports
// are finance's.
func (s *Server) booksRoutes(v1 *echo.Group) {
	readers := requireRole(RoleOps, RoleFinance)
	finance := requireRole(RoleFinance)
	v1.GET("/ledger/periods", s.listPeriods, readers)
	v1.GET("/ledger/periods/:period", s.getPeriod, readers)
	s.post(v1, "/ledger/periods/:period/close", s.closePeriod, nil, RoleFinance)
	v1.GET("/ledger/periods/:period/journal.csv", s.getPeriodJournal, finance)
	v1.GET("/ledger/journal.csv", s.getJournal, finance)
	v1.GET("/ledger/unconverted", s.listUnconverted, finance)
}

// journalExportTimeout bounds an export instead of RequestTimeout: a month
// of millions of entries takes minutes to stream.
const journalExportTimeout = 15 * time.Minute

// isJournalExport reports the routes bounded by journalExportTimeout.
func isJournalExport(route string) bool {
	return route == "/v1/ledger/journal.csv" || route == "/v1/ledger/periods/:period/journal.csv"
}

// PeriodView is a period of the books. A closed period carries who closed
// it, when, and the digest of its trial balance; trial_balance is in the
// answers about one period (closed: as stored at its close; open: as it
// stands), not in the list.
type PeriodView struct {
	Period       string            `json:"period"`
	Status       string            `json:"status"`
	StartsAt     time.Time         `json:"starts_at"`
	EndsAt       time.Time         `json:"ends_at"`
	Closable     bool              `json:"closable"`
	ClosedAt     *time.Time        `json:"closed_at"`
	ClosedBy     *string           `json:"closed_by"`
	Digest       *string           `json:"digest"`
	TrialBalance *TrialBalanceView `json:"trial_balance,omitempty"`
}

// PeriodList is the body of GET /v1/ledger/periods.
type PeriodList struct {
	Periods []PeriodView `json:"periods"`
}

const (
	periodOpen   = "open"
	periodClosed = "closed"
)

func closedPeriodView(c ledger.ClosedPeriod) PeriodView {
	tb := trialBalanceView(c.TrialBalance)
	asOf := c.End().Add(-time.Microsecond)
	tb.AsOf = &asOf
	closedAt, by, digest := c.ClosedAt, c.ClosedBy, c.Digest
	return PeriodView{Period: c.String(), Status: periodClosed, StartsAt: c.Start, EndsAt: c.End(),
		ClosedAt: &closedAt, ClosedBy: &by, Digest: &digest, TrialBalance: &tb}
}

// periodParam reads the {period} of the path. It fails with a 400 naming
// the expected form.
func periodParam(c echo.Context) (ledger.Period, error) {
	p, err := ledger.ParsePeriod(c.Param("period"))
	if err != nil {
		return ledger.Period{}, fmt.Errorf("%w: the period is a UTC month written YYYY-MM, such as 2026-03; got %q", ErrBadRequest, c.Param("period"))
	}
	return p, nil
}

func (s *Server) listPeriods(c echo.Context) error {
	states, err := ledger.ListPeriods(c.Request().Context(), s.config.Pool, time.Now())
	if err != nil {
		return err
	}
	out := PeriodList{Periods: make([]PeriodView, 0, len(states))}
	for _, st := range states {
		v := PeriodView{Period: st.String(), Status: periodOpen, StartsAt: st.Start, EndsAt: st.End(), Closable: st.Closable}
		if st.Closed {
			closedAt, by, digest := st.ClosedAt, st.ClosedBy, st.Digest
			v.Status, v.ClosedAt, v.ClosedBy, v.Digest = periodClosed, &closedAt, &by, &digest
		}
		out.Periods = append(out.Periods, v)
	}
	return writeJSON(c, http.StatusOK, out)
}

// getPeriod answers one period: a closed one as its close stored it, an
// open one with its trial balance as it stands (as of now for the current
// period, as of its last instant for an earlier one).
func (s *Server) getPeriod(c echo.Context) error {
	p, err := periodParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	closed, err := ledger.GetClosedPeriod(ctx, s.config.Pool, p)
	if err == nil {
		return writeJSON(c, http.StatusOK, closedPeriodView(closed))
	}
	if !errors.Is(err, ledger.ErrPeriodNotClosed) {
		return err
	}
	now := time.Now()
	if p.Start.After(now) {
		return withDetail(ledger.ErrNotFound, fmt.Sprintf("period %s has not begun", p))
	}
	states, err := ledger.ListPeriods(ctx, s.config.Pool, now)
	if err != nil {
		return err
	}
	v := PeriodView{Period: p.String(), Status: periodOpen, StartsAt: p.Start, EndsAt: p.End()}
	if i := slices.IndexFunc(states, func(st ledger.PeriodState) bool { return st.Start.Equal(p.Start) }); i >= 0 {
		v.Closable = states[i].Closable
	}
	asOf := p.End().Add(-time.Microsecond)
	if now.Before(asOf) {
		asOf = now
	}
	tb, err := ledger.TrialBalanceAsOf(ctx, s.config.Pool, asOf)
	if err != nil {
		return err
	}
	tbv := trialBalanceView(tb)
	tbv.AsOf = &asOf
	v.TrialBalance = &tbv
	return writeJSON(c, http.StatusOK, v)
}

// closePeriod closes a month that has ended, in order; closing twice
// answers the first close.
func (s *Server) closePeriod(c echo.Context) error {
	p, err := periodParam(c)
	if err != nil {
		return err
	}
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	now := time.Now()
	var order *ledger.PeriodOrderError
	closed, created, err := ledger.ClosePeriodTx(c.Request().Context(), tx, p, callerOf(c).Identity, s.exportSettings(), now)
	switch {
	case errors.Is(err, ledger.ErrPeriodNotEnded):
		return withDetail(ledger.ErrPeriodNotEnded, fmt.Sprintf("period %s has not ended: it can be closed from %s",
			p, p.End().Format(time.RFC3339)))
	case errors.As(err, &order):
		return withDetail(ledger.ErrPeriodOrder, fmt.Sprintf("periods close in order: close %s before %s", order.Next, p))
	case err != nil:
		return err
	}
	if created {
		if err := inbox.AppendAuditTx(c.Request().Context(), tx, inbox.ActionPeriodClose,
			s.operation(c, ledger.CloseAuditReason(closed)), inbox.Key{Provider: inbox.AuditProviderLedger, EventID: p.String()}); err != nil {
			return err
		}
	}
	return writeJSON(c, http.StatusOK, closedPeriodView(closed))
}

func (s *Server) exportSettings() ledger.ExportSettings {
	settings := ledger.ExportSettings{Accounts: s.config.GLAccounts, XeroTaxRate: s.config.XeroTaxRate,
		BooksCurrency: s.config.BooksCurrency}
	if settings.Accounts == nil {
		settings.Accounts = ledger.GLAccounts{}
	}
	if settings.XeroTaxRate == "" {
		settings.XeroTaxRate = DefaultXeroTaxRate
	}
	if settings.BooksCurrency == "" {
		settings.BooksCurrency = DefaultBooksCurrency
	}
	return settings
}

// DefaultXeroTaxRate is the tax rate name Xero's journal lines carry when
// PAYGATE_GL_XERO_TAX_RATE does not name one: movements of money at a
// payment provider carry no tax.
const DefaultXeroTaxRate = "Tax Exempt"

// DefaultBooksCurrency is the currency Xero's and QuickBooks' exports are
// in when PAYGATE_BOOKS_CURRENCY does not name one.
const DefaultBooksCurrency = "usd"

// The headers of a journal export's answer.
const (
	// HeaderParts says how many parts the export has (Xero's come in
	// parts of at most 300 lines; the others in one).
	HeaderParts = "Paygate-Parts"
	// HeaderUnconvertedMovements counts the ledger transactions posted
	// in the range that an export in the books currency leaves out, not
	// yet settled into it (0 when none were, and in the generic format).
	HeaderUnconvertedMovements = "Paygate-Unconverted-Movements"
)

// journalPart reads ?part=, a part of the export from 1; without it, the
// first.
func journalPart(c echo.Context) (int, error) {
	v := c.QueryParam("part")
	if v == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || strconv.Itoa(n) != v {
		return 0, badRequest("part must be a whole number from 1, the part of the export (Paygate-Parts says how many there are); got %q", v)
	}
	return n, nil
}

// partNotFound answers a part past an export's last.
func partNotFound(err error) error {
	var pe *ledger.JournalPartError
	if errors.As(err, &pe) {
		return withDetail(ledger.ErrNotFound, fmt.Sprintf("the export has %d part(s) (Paygate-Parts): part %d is not one of them", pe.Parts, pe.Part))
	}
	return err
}

func journalFormat(c echo.Context) (ledger.JournalFormat, error) {
	f := ledger.JournalFormat(c.QueryParam("format"))
	if f == "" {
		return ledger.JournalGeneric, nil
	}
	if !f.Valid() {
		return "", badRequest("format must be one of generic, xero, quickbooks")
	}
	return f, nil
}

// dayRange reads ?from= and ?to=, UTC days both inclusive, as the
// instants [from, to) they cover. It fails with a 400 naming what is
// expected.
func dayRange(c echo.Context) (from, to time.Time, err error) {
	day := func(name string) (time.Time, error) {
		v := c.QueryParam(name)
		if v == "" {
			return time.Time{}, badRequest("%s is required: a UTC day written YYYY-MM-DD", name)
		}
		d, err := time.Parse(time.DateOnly, v)
		if err != nil {
			return time.Time{}, badRequest("%s must be a UTC day written YYYY-MM-DD, such as 2026-03-31; got %q", name, v)
		}
		return d, nil
	}
	if from, err = day("from"); err != nil {
		return from, to, err
	}
	if to, err = day("to"); err != nil {
		return from, to, err
	}
	if to.Before(from) {
		return from, to, badRequest("to (%s) is before from (%s)", to.Format(time.DateOnly), from.Format(time.DateOnly))
	}
	return from, to.AddDate(0, 0, 1), nil
}

// currencyParam reads ?currency=, "" when absent.
func currencyParam(c echo.Context) (string, error) {
	currency := c.QueryParam("currency")
	if currency != "" && !currencyCode.MatchString(currency) {
		return "", badRequest("currency must be a lowercase ISO 4217 code such as usd")
	}
	return currency, nil
}

// getJournal streams the journals of the days from..to (UTC, both
// inclusive, by posted_at).
func (s *Server) getJournal(c echo.Context) error {
	format, err := journalFormat(c)
	if err != nil {
		return err
	}
	from, end, err := dayRange(c)
	if err != nil {
		return err
	}
	to := end.AddDate(0, 0, -1)
	g := ledger.JournalGranularity(c.QueryParam("granularity"))
	switch {
	case g == "":
		g = ledger.JournalByDay
	case !g.Valid():
		return badRequest("granularity must be day or transaction")
	}
	currency, err := currencyParam(c)
	if err != nil {
		return err
	}
	part, err := journalPart(c)
	if err != nil {
		return err
	}
	o := ledger.JournalOpts{From: from, To: end, Format: format, Granularity: g, Currency: currency,
		Settings: s.exportSettings(), Part: part}
	name := fmt.Sprintf("paygate-journal-%s-%s-%s-%s", from.Format(time.DateOnly), to.Format(time.DateOnly), format, g)
	if currency != "" {
		name += "-" + currency
	}
	return s.streamJournal(c, name, o, nil)
}

// getPeriodJournal streams a closed month's frozen export: one journal per
// day and currency, rendered with the settings stored at the close, the
// same bytes on every read, its SHA-256 in Repr-Digest.
func (s *Server) getPeriodJournal(c echo.Context) error {
	p, err := periodParam(c)
	if err != nil {
		return err
	}
	format, err := journalFormat(c)
	if err != nil {
		return err
	}
	part, err := journalPart(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	closed, err := ledger.GetClosedPeriod(ctx, s.config.Pool, p)
	if errors.Is(err, ledger.ErrPeriodNotClosed) {
		return withDetail(ledger.ErrPeriodNotClosed, fmt.Sprintf(
			"period %s is open, so its journal is not final: GET /v1/ledger/journal.csv?from=%s&to=%s exports it as it stands",
			p, p.Start.Format(time.DateOnly), p.End().AddDate(0, 0, -1).Format(time.DateOnly)))
	}
	if err != nil {
		return err
	}
	if format != ledger.JournalXero && part == 1 {
		part = 0 // the one part is the whole export
	}
	digest, size, err := ledger.PeriodJournalDigest(ctx, s.config.Pool, closed, format, part)
	if err != nil {
		return partNotFound(err)
	}
	sum, err := hex.DecodeString(digest)
	if err != nil {
		return fmt.Errorf("period %s export digest %q: %w", p, digest, err)
	}
	h := c.Response().Header()
	// RFC 9530: the digest of the representation, the body as sent.
	h.Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum)+":")
	h.Set(echo.HeaderContentLength, strconv.FormatInt(size, 10))
	o := ledger.PeriodJournalOpts(closed, format)
	o.Part = part
	return s.streamJournal(c, fmt.Sprintf("paygate-journal-%s-%s", p, format), o, sum)
}

// streamJournal writes the export as the database returns it, named
// name (a Xero part's name says which part of how many it is, when there
// are several). The
// headers go once the export knows its parts and the movements it leaves
// out; a failure before that (a part it does not have) is answered as a
// problem. Once the status is sent, a failure can only break the
// connection, so that a short file never passes for the whole export.
// With want, the bytes sent are hashed and checked against it: a mismatch
// (the ledger changed below the database's guards) is logged.
func (s *Server) streamJournal(c echo.Context, name string, o ledger.JournalOpts, want []byte) error {
	res := c.Response()
	ctx := c.Request().Context()
	o.Ready = func(sum ledger.JournalSummary) error {
		if o.Format == ledger.JournalXero && o.Part > 0 && sum.Parts > 1 {
			name += fmt.Sprintf("-part-%d-of-%d", o.Part, sum.Parts)
		}
		h := res.Header()
		h.Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
		h.Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		h.Set(HeaderParts, strconv.Itoa(sum.Parts))
		h.Set(HeaderUnconvertedMovements, strconv.Itoa(sum.Unconverted))
		res.WriteHeader(http.StatusOK)
		return nil
	}
	h := sha256.New()
	if _, err := ledger.WriteJournal(ctx, s.config.Pool, io.MultiWriter(res, h), o); err != nil {
		if !res.Committed {
			res.Header().Del(echo.HeaderContentLength)
			res.Header().Del("Repr-Digest")
			return partNotFound(err)
		}
		s.config.Logger.ErrorContext(ctx, "stream journal export", "file", name, "error", err.Error())
		panic(http.ErrAbortHandler)
	}
	if want != nil && !bytes.Equal(h.Sum(nil), want) {
		s.config.Logger.ErrorContext(ctx, "a closed period's export differs from its kept digest", "file", name)
	}
	return nil
}

// UnconvertedMovementView is a ledger transaction that the Xero and
// QuickBooks exports of a range leave out: in another currency than the
// books currency, and not settled into it by the range's end.
type UnconvertedMovementView struct {
	// ID is the transaction's id: its journal is PG-T<id> in the exports
	// by transaction (the generic one has it now; Xero's and QuickBooks'
	// once it is settled).
	ID       int64       `json:"id"`
	Ref      string      `json:"ref"`
	PostedAt time.Time   `json:"posted_at"`
	Kind     ledger.Kind `json:"kind"`
	Currency string      `json:"currency"`
	// Amount is what it moves, the sum of its debits, in its own
	// currency.
	Amount string `json:"amount"`
	// PaymentID is null for a movement of no payment (a payout);
	// Reference is the payment's order reference, null when it has none.
	PaymentID *string `json:"payment_id"`
	Reference *string `json:"reference"`
}

// UnconvertedPage is the body of GET /v1/ledger/unconverted.
type UnconvertedPage struct {
	Movements     []UnconvertedMovementView `json:"movements"`
	BooksCurrency string                    `json:"books_currency"`
	NextCursor    *string                   `json:"next_cursor"`
}

// listUnconverted answers the movements that the Xero and QuickBooks
// exports of the days from..to leave out (what their
// Paygate-Unconverted-Movements counts), in posting order.
func (s *Server) listUnconverted(c echo.Context) error {
	from, to, err := dayRange(c)
	if err != nil {
		return err
	}
	currency, err := currencyParam(c)
	if err != nil {
		return err
	}
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	books := s.exportSettings().BooksCurrency
	list, next, err := ledger.ListUnconverted(c.Request().Context(), s.config.Pool,
		ledger.UnconvertedFilter{From: from, To: to, BooksCurrency: books, Currency: currency}, page.Cursor, page.Limit)
	if err != nil {
		return cursorErr(err)
	}
	out := UnconvertedPage{Movements: make([]UnconvertedMovementView, 0, len(list)), BooksCurrency: books, NextCursor: nullable(next)}
	for _, m := range list {
		out.Movements = append(out.Movements, UnconvertedMovementView{ID: m.ID, Ref: m.Ref, PostedAt: m.PostedAt, Kind: m.Kind,
			Currency: m.Currency, Amount: amount(m.Amount, m.Currency), PaymentID: nullable(m.PaymentID), Reference: nullable(m.Reference)})
	}
	return writeJSON(c, http.StatusOK, out)
}
