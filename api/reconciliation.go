package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/reconcile"
)

// reconciliationRoutes mounts the reconciliation routes: finance starts
// runs; finance and ops read them (ops see everything, as in the console).
func (s *Server) reconciliationRoutes(v1 *echo.Group) {
	readers := requireRole(RoleOps, RoleFinance)
	s.post(v1, "/reconciliation/runs", s.createReconciliationRun, runRequest{}, RoleFinance)
	v1.GET("/reconciliation/runs", s.listReconciliationRuns, readers)
	v1.GET("/reconciliation/runs/:id", s.getReconciliationRun, readers)
	v1.GET("/reconciliation/runs/:id/items", s.listReconciliationItems, readers)
	v1.GET("/reconciliation/runs/:id/items.csv", s.getReconciliationItemsCSV, readers)
	v1.GET("/reconciliation/items/:id", s.getReconciliationItem, readers)
	s.post(v1, "/reconciliation/items/:id/resolve", s.resolveReconciliationItem, ResolveRequest{}, RoleFinance)
}

// dayProvider is the provider whose runs are of a UTC day (Stripe's
// balance transactions); every other provider's runs are of a settlement
// batch (Adyen's reports). A run request naming no provider is one of its
// days.
const dayProvider = "stripe"

// RunView is the answer to a run request: {id, date, status} for a day of
// Stripe's, {id, provider, batch, status} for a provider's settlement
// batch.
type RunView struct {
	ID       int64   `json:"id"`
	Provider string  `json:"provider,omitempty"`
	Date     *string `json:"date,omitempty"`
	Batch    *int64  `json:"batch,omitempty"`
	Status   string  `json:"status"`
}

func runView(run reconcile.Run) RunView {
	date, batch := runScope(run)
	v := RunView{ID: run.ID, Date: date, Batch: batch, Status: string(run.Status)}
	if batch != nil {
		v.Provider = run.Provider
	}
	return v
}

// runScope is a run's date or batch, the other nil.
func runScope(run reconcile.Run) (date *string, batch *int64) {
	if run.Batch != 0 {
		b := run.Batch
		return nil, &b
	}
	d := run.Date.Format(reconcile.DateLayout)
	return &d, nil
}

// RunSummaryView is a run as GET /v1/reconciliation/runs lists it: the run
// and its summary, without the report's other sections and the items
// (GET /v1/reconciliation/runs/{id} has them).
type RunSummaryView struct {
	RunHeader
	Summary map[reconcile.Status]int `json:"summary"`
}

// RunHeader is what every view of a run shows first: which provider's day
// or settlement batch, where it stands, who asked and when.
type RunHeader struct {
	ID          int64      `json:"id"`
	Provider    string     `json:"provider"`
	Date        *string    `json:"date"`
	Batch       *int64     `json:"batch"`
	Status      string     `json:"status"`
	Trigger     string     `json:"trigger"`
	RequestedBy string     `json:"requested_by"`
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	Error       *string    `json:"error"`
}

// RunPage is the body of GET /v1/reconciliation/runs.
type RunPage struct {
	Runs       []RunSummaryView `json:"runs"`
	NextCursor *string          `json:"next_cursor"`
}

// ItemPage is the body of GET /v1/reconciliation/runs/{id}/items.
type ItemPage struct {
	Items      []ItemView `json:"items"`
	NextCursor *string    `json:"next_cursor"`
}

// RunReportView is a run with its report and items.
type RunReportView struct {
	RunHeader
	Counts            reconcile.Counts             `json:"counts"`
	Summary           map[reconcile.Status]int     `json:"summary"`
	Currencies        []reconcile.CurrencyTotals   `json:"currencies"`
	Payouts           []reconcile.PayoutSettlement `json:"payouts"`
	RecoveredEvents   int                          `json:"recovered_events"`
	Recovery          reconcile.Recovery           `json:"recovery"`
	TimingDifferences []reconcile.TimingDifference `json:"timing_differences"`
	// Statement is the report file a settlement batch's run read; null
	// for a day's run.
	Statement *reconcile.StatementFile `json:"statement"`
	// Exceptions counts the run's exceptions still open and those finance
	// resolved.
	Exceptions reconcile.ExceptionCounts `json:"exceptions"`
	// Items is the first page of the run's items (RunItemsLimit, or
	// ?limit=); ItemsNextCursor continues it on
	// GET /v1/reconciliation/runs/{id}/items, null when it was the last.
	Items           []ItemView `json:"items"`
	ItemsNextCursor *string    `json:"items_next_cursor"`
}

// RunItemsLimit is how many items a run's answer carries when ?limit= does
// not say: a run of a busy day has hundreds of thousands, which no one reads
// in one answer.
const RunItemsLimit = 100

// ItemView is one item; absent values are null. It has the CSV's
// columns (reconcile.CSVHeader), with the same values.
type ItemView struct {
	ID             int64            `json:"id"`
	RunID          int64            `json:"run_id"`
	Status         reconcile.Status `json:"status"`
	ProviderTxnID  *string          `json:"provider_txn_id"`
	SourceID       *string          `json:"source_id"`
	Ref            *string          `json:"ref"`
	Type           string           `json:"type"`
	Currency       string           `json:"currency"`
	ProviderAmount *string          `json:"provider_amount"`
	ProviderFee    *string          `json:"provider_fee"`
	LedgerAmount   *string          `json:"ledger_amount"`
	// The presentment side and the rate of a movement settled in another
	// currency; null otherwise.
	PresentmentCurrency *string `json:"presentment_currency"`
	PresentmentAmount   *string `json:"presentment_amount"`
	ExchangeRate        *string `json:"exchange_rate"`
	// PaymentID is the payment the item is about, when paygate knows it.
	PaymentID *string `json:"payment_id"`
	// How finance resolved an exception; all null while it is open, and
	// on items that are not exceptions. AdjustmentRef is the ledger ref of
	// a write-off's adjustment, null when it moved no money.
	Resolution    *reconcile.ResolutionKind `json:"resolution"`
	Note          *string                   `json:"note"`
	ResolvedBy    *string                   `json:"resolved_by"`
	ResolvedAt    *time.Time                `json:"resolved_at"`
	AdjustmentRef *string                   `json:"adjustment_ref"`
	// Reference is the merchant's order reference of the item's payment,
	// as the run found it; null when there is none.
	Reference *string `json:"reference"`
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func itemView(it reconcile.Item) ItemView {
	rec := it.Record() // the CSV's cells: the same values, the same formatting
	v := ItemView{
		ID: it.ID, RunID: it.RunID,
		Status: it.Status, ProviderTxnID: orNull(rec[1]), SourceID: orNull(rec[2]), Ref: orNull(rec[3]),
		Type: rec[4], Currency: rec[5],
		ProviderAmount: orNull(rec[6]), ProviderFee: orNull(rec[7]), LedgerAmount: orNull(rec[8]),
		PresentmentCurrency: orNull(rec[9]), PresentmentAmount: orNull(rec[10]), ExchangeRate: orNull(rec[11]),
		PaymentID: orNull(it.PaymentID), Reference: orNull(it.Reference),
	}
	if r := it.Resolution; r != nil {
		kind, at := r.Kind, r.ResolvedAt.UTC()
		v.Resolution, v.Note, v.ResolvedBy, v.ResolvedAt, v.AdjustmentRef = &kind, &r.Note, &r.ResolvedBy, &at, orNull(r.AdjustmentRef)
	}
	return v
}

func runReportView(run reconcile.Run, items []reconcile.Item) RunReportView {
	date, batch := runScope(run)
	v := RunReportView{
		RunHeader: RunHeader{
			ID: run.ID, Provider: run.Provider, Date: date, Batch: batch, Status: string(run.Status),
			Trigger: string(run.Trigger), RequestedBy: run.RequestedBy,
			StartedAt: run.StartedAt, FinishedAt: run.FinishedAt, Error: orNull(run.Error),
		},
		Summary:           map[reconcile.Status]int{},
		Currencies:        []reconcile.CurrencyTotals{},
		Payouts:           []reconcile.PayoutSettlement{},
		Recovery:          reconcile.Recovery{EventIDs: []string{}},
		TimingDifferences: []reconcile.TimingDifference{},
		Items:             make([]ItemView, 0, len(items)),
	}
	for _, st := range reconcile.Statuses {
		v.Summary[st] = 0
	}
	if r := run.Report; r != nil {
		for st, n := range r.Summary {
			v.Summary[st] = n
		}
		v.Counts = r.Counts
		v.RecoveredEvents = r.Recovery.Recovered
		v.Recovery = r.Recovery
		if r.Currencies != nil {
			v.Currencies = r.Currencies
		}
		if r.Payouts != nil {
			v.Payouts = r.Payouts
		}
		if r.TimingDifferences != nil {
			v.TimingDifferences = r.TimingDifferences
		}
		v.Statement = r.Statement
		if v.Recovery.EventIDs == nil {
			v.Recovery.EventIDs = []string{}
		}
	}
	for _, it := range items {
		v.Items = append(v.Items, itemView(it))
	}
	return v
}

// runRequest is the body of POST /v1/reconciliation/runs: a day of
// Stripe's (date), or a provider's settlement batch (provider and batch).
type runRequest struct {
	Provider *string `json:"provider"`
	Date     *string `json:"date"`
	Batch    *int64  `json:"batch"`
}

// scope reads what the request asks to reconcile. It fails with
// ErrBadRequest.
func (body runRequest) scope() (reconcile.Scope, error) {
	provider := ""
	if body.Provider != nil {
		provider = *body.Provider
	}
	switch {
	case body.Date != nil && body.Batch != nil:
		return reconcile.Scope{}, fmt.Errorf(`%w: give "date" (a day of %s's) or "batch" (a provider's settlement batch), not both`, ErrBadRequest, dayProvider)
	case body.Batch != nil:
		if provider == "" || provider == dayProvider {
			return reconcile.Scope{}, fmt.Errorf(`%w: "batch" needs the "provider" whose settlement batch it is (such as "adyen"); %s's runs are of a "date"`, ErrBadRequest, dayProvider)
		}
		if *body.Batch < 1 {
			return reconcile.Scope{}, fmt.Errorf("%w: %w", ErrBadRequest, reconcile.ErrInvalidBatch)
		}
		return reconcile.BatchScope(provider, *body.Batch), nil
	case body.Date != nil:
		if provider != "" && provider != dayProvider {
			return reconcile.Scope{}, fmt.Errorf(`%w: %s's runs are of a settlement "batch", not a "date"`, ErrBadRequest, provider)
		}
		day, err := reconcile.ParseDate(*body.Date, time.Now())
		if err != nil {
			return reconcile.Scope{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		return reconcile.DayScope(dayProvider, day), nil
	}
	return reconcile.Scope{}, fmt.Errorf(`%w: "date" is required (YYYY-MM-DD), or "provider" and "batch" for a settlement batch`, ErrBadRequest)
}

func (s *Server) createReconciliationRun(c echo.Context) error {
	var body runRequest
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	scope, err := body.scope()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if scope.Batch != 0 {
		// A batch is reconciled from its stored report: without one, the run
		// could only fail.
		if _, err := reconcile.ReportOfBatch(ctx, s.config.Pool, scope.Provider, scope.Batch); err != nil {
			return err
		}
	} else if cause := s.config.ReconcileUnavailable; cause != nil {
		// A failure, not a stored answer: the key is released, so the same
		// request succeeds once the server is configured.
		return fmt.Errorf("%w: %w", reconcile.ErrUnavailable, cause)
	}
	// The run row and its job commit together (with the idempotency key's
	// stored answer): never a run that nobody will perform, or the reverse.
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	run, err := reconcile.CreateRunTx(ctx, tx, scope, reconcile.TriggerAPI, callerOf(c).Identity)
	if err != nil {
		return err
	}
	if err := s.config.Jobs.InsertReconcileTx(ctx, tx, run); err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, fmt.Sprintf("/v1/reconciliation/runs/%d", run.ID))
	return writeJSON(c, http.StatusAccepted, runView(run))
}

// findRun reads the run named in the path. It fails with
// reconcile.ErrRunNotFound, for an id that is not a run's or not an id.
func (s *Server) findRun(c echo.Context) (reconcile.Run, error) {
	notFound := withDetail(reconcile.ErrRunNotFound, fmt.Sprintf("no reconciliation run has id %q", c.Param("id")))
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return reconcile.Run{}, notFound
	}
	run, err := reconcile.GetRun(c.Request().Context(), s.config.Pool, id)
	if errors.Is(err, reconcile.ErrRunNotFound) {
		return run, notFound
	}
	return run, err
}

func (s *Server) getReconciliationRun(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	run, err := s.findRun(c)
	if err != nil {
		return err
	}
	limit := page.Limit
	if limit == 0 {
		limit = RunItemsLimit
	}
	items, next, err := reconcile.ItemsPage(c.Request().Context(), s.config.Pool, run.ID, reconcile.ItemFilter{}, "", limit)
	if err != nil {
		return err
	}
	v := runReportView(run, items)
	v.ItemsNextCursor = nullable(next)
	if v.Exceptions, err = reconcile.CountExceptions(c.Request().Context(), s.config.Pool, run.ID); err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, v)
}

func (s *Server) listReconciliationRuns(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	f := reconcile.RunFilter{Provider: c.QueryParam("provider")}
	if v := c.QueryParam("date"); v != "" {
		if f.Date, err = time.Parse(reconcile.DateLayout, v); err != nil {
			return badRequest("date must be a day such as 2024-06-20")
		}
	}
	if v := c.QueryParam("batch"); v != "" {
		if f.Batch, err = reconcile.ParseBatch(v); err != nil {
			return badRequest("batch must be a settlement batch number such as 12")
		}
	}
	runs, next, err := reconcile.ListRuns(c.Request().Context(), s.config.Pool, f, page.Cursor, page.Limit)
	if err != nil {
		return cursorErr(err)
	}
	out := RunPage{Runs: make([]RunSummaryView, 0, len(runs)), NextCursor: nullable(next)}
	for _, run := range runs {
		full := runReportView(run, nil)
		out.Runs = append(out.Runs, RunSummaryView{RunHeader: full.RunHeader, Summary: full.Summary})
	}
	return writeJSON(c, http.StatusOK, out)
}

// listReconciliationItems pages a run's items in report order, those of
// one status with ?status=, the open or the resolved exceptions with
// ?state=; the run's own answer carries the first page and the cursor of
// the next.
func (s *Server) listReconciliationItems(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	f := reconcile.ItemFilter{Status: reconcile.Status(c.QueryParam("status")), State: reconcile.ItemState(c.QueryParam("state"))}
	if f.Status != "" && !slices.Contains(reconcile.Statuses, f.Status) {
		return badRequest("status must be one of %v", reconcile.Statuses)
	}
	if f.State != "" && !slices.Contains(reconcile.ItemStates, f.State) {
		return badRequest("state must be open (exceptions not resolved yet) or resolved")
	}
	run, err := s.findRun(c)
	if err != nil {
		return err
	}
	items, next, err := reconcile.ItemsPage(c.Request().Context(), s.config.Pool, run.ID, f, page.Cursor, page.Limit)
	if err != nil {
		return cursorErr(err)
	}
	out := ItemPage{Items: make([]ItemView, 0, len(items)), NextCursor: nullable(next)}
	for _, it := range items {
		out.Items = append(out.Items, itemView(it))
	}
	return writeJSON(c, http.StatusOK, out)
}

// getReconciliationItemsCSV streams the run's items page by page: the
// answer of a run of any size is written in bounded memory.
func (s *Server) getReconciliationItemsCSV(c echo.Context) error {
	run, err := s.findRun(c)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("reconciliation-%s-run-%d.csv", run.Date.Format(reconcile.DateLayout), run.ID)
	if run.Batch != 0 {
		name = fmt.Sprintf("reconciliation-%s-batch-%d-run-%d.csv", run.Provider, run.Batch, run.ID)
	}
	res := c.Response()
	res.Header().Set("Content-Disposition", `attachment; filename="`+strings.ReplaceAll(name, `"`, "")+`"`)
	res.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	res.WriteHeader(http.StatusOK)
	if err := reconcile.WriteRunCSV(c.Request().Context(), s.config.Pool, res, run.ID); err != nil {
		// The status is sent: breaking the connection is the one way left
		// to tell the client the file is incomplete, rather than let a
		// short CSV pass for the whole run.
		s.config.Logger.ErrorContext(c.Request().Context(), "stream reconciliation items", "run_id", run.ID, "error", err.Error())
		panic(http.ErrAbortHandler)
	}
	return nil
}

// itemID reads the item id of the path. It fails with
// reconcile.ErrItemNotFound, for an id that is not an item's or not an id.
func itemID(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, withDetail(reconcile.ErrItemNotFound, fmt.Sprintf("no reconciliation item has id %q", c.Param("id")))
	}
	return id, nil
}

func (s *Server) getReconciliationItem(c echo.Context) error {
	id, err := itemID(c)
	if err != nil {
		return err
	}
	it, _, err := reconcile.GetItem(c.Request().Context(), s.config.Pool, id)
	if errors.Is(err, reconcile.ErrItemNotFound) {
		return withDetail(reconcile.ErrItemNotFound, fmt.Sprintf("no reconciliation item has id %d", id))
	}
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, itemView(it))
}

// ResolveRequest is the body of POST /v1/reconciliation/items/{id}/resolve.
type ResolveRequest struct {
	// Resolution is matched_manually, provider_error or write_off.
	Resolution reconcile.ResolutionKind `json:"resolution"`
	// Note says what finance found; required, at most
	// reconcile.MaxNoteLen characters.
	Note string `json:"note"`
}

// resolveReconciliationItem resolves an exception once, with the caller as
// resolved_by: the same resolution again answers the first, another is a
// 409.
func (s *Server) resolveReconciliationItem(c echo.Context) error {
	var body ResolveRequest
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	id, err := itemID(c)
	if err != nil {
		return err
	}
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	res, err := reconcile.ResolveTx(c.Request().Context(), tx, id, reconcile.Resolve{
		Kind: body.Resolution, Note: body.Note, Op: s.operation(c, ""),
	})
	if errors.Is(err, reconcile.ErrItemNotFound) {
		return withDetail(reconcile.ErrItemNotFound, fmt.Sprintf("no reconciliation item has id %d", id))
	}
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, itemView(res.Item))
}
