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
}

// RunView is the answer to a run request.
type RunView struct {
	ID     int64  `json:"id"`
	Date   string `json:"date"`
	Status string `json:"status"`
}

// RunSummaryView is a run as GET /v1/reconciliation/runs lists it: the run
// and its summary, without the report's other sections and the items
// (GET /v1/reconciliation/runs/{id} has them).
type RunSummaryView struct {
	RunHeader
	Summary map[reconcile.Status]int `json:"summary"`
}

// RunHeader is what every view of a run shows first: which day, where it
// stands, who asked and when.
type RunHeader struct {
	ID          int64      `json:"id"`
	Date        string     `json:"date"`
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

// ItemView is one item; absent values are null.
type ItemView struct {
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
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func itemView(it reconcile.Item) ItemView {
	rec := it.Record() // the CSV's cells: the same values, the same formatting
	return ItemView{
		Status: it.Status, ProviderTxnID: orNull(rec[1]), SourceID: orNull(rec[2]), Ref: orNull(rec[3]),
		Type: rec[4], Currency: rec[5],
		ProviderAmount: orNull(rec[6]), ProviderFee: orNull(rec[7]), LedgerAmount: orNull(rec[8]),
		PresentmentCurrency: orNull(rec[9]), PresentmentAmount: orNull(rec[10]), ExchangeRate: orNull(rec[11]),
	}
}

func runReportView(run reconcile.Run, items []reconcile.Item) RunReportView {
	v := RunReportView{
		RunHeader: RunHeader{
			ID: run.ID, Date: run.Date.Format(reconcile.DateLayout), Status: string(run.Status),
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
		if v.Recovery.EventIDs == nil {
			v.Recovery.EventIDs = []string{}
		}
	}
	for _, it := range items {
		v.Items = append(v.Items, itemView(it))
	}
	return v
}

// runRequest is the body of POST /v1/reconciliation/runs.
type runRequest struct {
	Date *string `json:"date"`
}

func (s *Server) createReconciliationRun(c echo.Context) error {
	var body runRequest
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if body.Date == nil {
		return fmt.Errorf(`%w: "date" is required (YYYY-MM-DD)`, ErrBadRequest)
	}
	day, err := reconcile.ParseDate(*body.Date, time.Now())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if cause := s.config.ReconcileUnavailable; cause != nil {
		// A failure, not a stored answer: the key is released, so the same
		// request succeeds once the server is configured.
		return fmt.Errorf("%w: %w", reconcile.ErrUnavailable, cause)
	}
	ctx := c.Request().Context()
	// The run row and its job commit together (with the idempotency key's
	// stored answer): never a run that nobody will perform, or the reverse.
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	run, err := reconcile.CreateRunTx(ctx, tx, day, reconcile.TriggerAPI, callerOf(c).Identity)
	if err != nil {
		return err
	}
	if err := s.config.Jobs.InsertReconcileTx(ctx, tx, run); err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, fmt.Sprintf("/v1/reconciliation/runs/%d", run.ID))
	return writeJSON(c, http.StatusAccepted, RunView{ID: run.ID, Date: run.Date.Format(reconcile.DateLayout), Status: string(run.Status)})
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
	return writeJSON(c, http.StatusOK, v)
}

func (s *Server) listReconciliationRuns(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	var f reconcile.RunFilter
	if v := c.QueryParam("date"); v != "" {
		if f.Date, err = time.Parse(reconcile.DateLayout, v); err != nil {
			return badRequest("date must be a day such as 2024-06-20")
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
// one status with ?status=; the run's own answer carries the first page
// and the cursor of the next.
func (s *Server) listReconciliationItems(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	f := reconcile.ItemFilter{Status: reconcile.Status(c.QueryParam("status"))}
	if f.Status != "" && !slices.Contains(reconcile.Statuses, f.Status) {
		return badRequest("status must be one of %v", reconcile.Statuses)
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
