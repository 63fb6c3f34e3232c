package stripe

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/paygate/paygate/provider"
)

// APIConfig configures the API client.
type APIConfig struct {
	// APIKey is the secret key (PAYGATE_STRIPE_API_KEY). Required.
	APIKey string
	// URL is the API base without /v1 (PAYGATE_STRIPE_API_URL);
	// https://api.stripe.com when empty. stripe-go adds the paths.
	URL string
	// PageSize is the list page size, 1–100; 100 when zero.
	PageSize int64
	// HTTPClient is used for every call (its transport wrapped, see
	// NewAPI); one like stripe-go's default when nil.
	HTTPClient *http.Client
	// MaxNetworkRetries is stripe-go's retry count for failed requests
	// (it retries with Stripe's idempotency and backoff rules, and
	// rate-limited reads, see NewAPI); 2 when nil.
	MaxNetworkRetries *int64
	// Progress, when set, is told after each page how many records of a
	// list have been read, for long runs.
	Progress func(msg string)
}

// ErrNoAPIKey: the provider cannot be called without a key.
var ErrNoAPIKey = errors.New("PAYGATE_STRIPE_API_KEY is not set")

// API reads Stripe's API with stripe-go: balance transactions and events
// with auto-pagination, the records reconciliation compares the ledger
// with.
type API struct {
	api      *client.API
	pageSize int64
	progress func(string)
}

// NewAPI returns the API client. It fails with ErrNoAPIKey.
//
// Retries are stripe-go's (MaxNetworkRetries, with its backoff of half a
// second growing to five): it retries network failures, 409s, 5xx, lock
// timeouts and any answer with Stripe-Should-Retry: true, and never one
// with Stripe-Should-Retry: false. It leaves a rate-limited 429 alone, so
// as not to add to the contention of an interactive caller; reconciliation
// is a batch of reads that would only fail and start over, so a GET
// answered 429 without the header is marked retryable before stripe-go
// sees it, and waits out the limit in the same backoff. A 429 that says
// Stripe-Should-Retry: false still stops at once.
func NewAPI(cfg APIConfig) (*API, error) {
	if strings.TrimSpace(cfg.APIKey) == "" {
		return nil, ErrNoAPIKey
	}
	url := strings.TrimRight(cfg.URL, "/")
	if url == "" {
		url = stripego.APIURL
	}
	bc := &stripego.BackendConfig{
		URL:               stripego.String(url),
		HTTPClient:        retryingRateLimits(cfg.HTTPClient),
		MaxNetworkRetries: cfg.MaxNetworkRetries,
		// stripe-go logs request failures itself; the run reports them.
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull},
	}
	backends := &stripego.Backends{
		API:     stripego.GetBackendWithConfig(stripego.APIBackend, bc),
		Connect: stripego.GetBackendWithConfig(stripego.ConnectBackend, bc),
		Uploads: stripego.GetBackendWithConfig(stripego.UploadsBackend, bc),
	}
	size := cfg.PageSize
	if size <= 0 || size > 100 {
		size = 100
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	return &API{api: client.New(cfg.APIKey, backends), pageSize: size, progress: progress}, nil
}

// defaultHTTPTimeout is stripe-go's own for its default client.
const defaultHTTPTimeout = 80 * time.Second

// retryingRateLimits returns c (a copy; stripe-go's like default when nil)
// whose transport marks rate-limited reads retryable (see NewAPI).
func retryingRateLimits(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	} else {
		// As stripe-go's default: HTTP/1.1 only, since Go's HTTP/2 client
		// can resend an empty body after a GOAWAY.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ForceAttemptHTTP2 = false
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		out = http.Client{Timeout: defaultHTTPTimeout, Transport: t}
	}
	base := out.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	out.Transport = rateLimitRetry{base: base}
	return &out
}

// rateLimitRetry is the transport of retryingRateLimits.
type rateLimitRetry struct{ base http.RoundTripper }

func (rt rateLimitRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(req)
	if err == nil && req.Method == http.MethodGet && resp.StatusCode == http.StatusTooManyRequests &&
		resp.Header.Get("Stripe-Should-Retry") == "" {
		resp.Header.Set("Stripe-Should-Retry", "true")
	}
	return resp, err
}

func (s *API) listParams(ctx context.Context) stripego.ListParams {
	return stripego.ListParams{Context: ctx, Limit: stripego.Int64(s.pageSize)}
}

func dayRange(from, to time.Time) *stripego.RangeQueryParams {
	return &stripego.RangeQueryParams{GreaterThanOrEqual: from.Unix(), LesserThan: to.Unix()}
}

// providerErr wraps a stripe-go failure in provider.ErrAPI, and in
// provider.ErrAPIRefused too when Stripe answered that the request itself
// is wrong (400 or 404): retrying it cannot help.
func providerErr(what string, err error) error {
	var se *stripego.Error
	if errors.As(err, &se) && (se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusNotFound) {
		return fmt.Errorf("%w: %w: %s: %w", provider.ErrAPI, provider.ErrAPIRefused, what, err)
	}
	return fmt.Errorf("%w: %s: %w", provider.ErrAPI, what, err)
}

// BalanceTransactions lists every balance transaction created in [from,
// to), all pages.
func (s *API) BalanceTransactions(ctx context.Context, from, to time.Time) ([]provider.BalanceTransaction, error) {
	params := &stripego.BalanceTransactionListParams{ListParams: s.listParams(ctx), CreatedRange: dayRange(from, to)}
	return s.listBalanceTransactions(params, "balance transactions")
}

// BalanceTransactionsBySource lists the balance transactions of one
// source object (ch_, re_, dp_, po_), whenever they were created.
func (s *API) BalanceTransactionsBySource(ctx context.Context, sourceID string) ([]provider.BalanceTransaction, error) {
	params := &stripego.BalanceTransactionListParams{ListParams: s.listParams(ctx), Source: stripego.String(sourceID)}
	return s.listBalanceTransactions(params, "")
}

// PayoutTransactions lists the balance transactions a payout settled
// (automatic payouts), its own included.
func (s *API) PayoutTransactions(ctx context.Context, payoutID string) ([]provider.BalanceTransaction, error) {
	params := &stripego.BalanceTransactionListParams{ListParams: s.listParams(ctx), Payout: stripego.String(payoutID)}
	return s.listBalanceTransactions(params, "")
}

func (s *API) listBalanceTransactions(params *stripego.BalanceTransactionListParams, what string) ([]provider.BalanceTransaction, error) {
	it := s.api.BalanceTransactions.List(params)
	out := []provider.BalanceTransaction{}
	var (
		page  *stripego.BalanceTransactionList
		rates map[string]decimal.NullDecimal
	)
	for it.Next() {
		if l := it.BalanceTransactionList(); l != page {
			page = l
			var err error
			if rates, err = exchangeRates(l.LastResponse); err != nil {
				return nil, providerErr("list balance transactions", err)
			}
		}
		bt := fromStripe(it.BalanceTransaction())
		bt.ExchangeRate = rates[bt.ID]
		out = append(out, bt)
		if what != "" && len(out)%int(s.pageSize) == 0 {
			s.progress(fmt.Sprintf("listed %d %s", len(out), what))
		}
	}
	if err := it.Err(); err != nil {
		return nil, providerErr("list balance transactions", err)
	}
	return out, nil
}

// BalanceTransaction returns one by id; found is false when Stripe has
// none.
func (s *API) BalanceTransaction(ctx context.Context, id string) (provider.BalanceTransaction, bool, error) {
	params := &stripego.BalanceTransactionParams{}
	params.Context = ctx
	bt, err := s.api.BalanceTransactions.Get(id, params)
	var se *stripego.Error
	if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
		return provider.BalanceTransaction{}, false, nil
	}
	if err != nil {
		return provider.BalanceTransaction{}, false, providerErr("get balance transaction "+id, err)
	}
	rates, err := exchangeRates(bt.LastResponse)
	if err != nil {
		return provider.BalanceTransaction{}, false, providerErr("get balance transaction "+id, err)
	}
	out := fromStripe(bt)
	out.ExchangeRate = rates[out.ID]
	return out, true, nil
}

// exchangeRates reads the exchange_rate of every balance transaction in an
// answer (a list page or one object) from its raw JSON, as a decimal:
// stripe-go decodes it into a float64, and an amount converted through a
// float is not the amount Stripe booked.
func exchangeRates(resp *stripego.APIResponse) (map[string]decimal.NullDecimal, error) {
	if resp == nil || len(resp.RawJSON) == 0 {
		return nil, errors.New("balance transactions answer without its raw body")
	}
	type record struct {
		ID           string       `json:"id"`
		ExchangeRate *json.Number `json:"exchange_rate"`
	}
	var body struct {
		record
		Data []record `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(resp.RawJSON))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		return nil, fmt.Errorf("decode exchange rates: %w", err)
	}
	out := map[string]decimal.NullDecimal{}
	for _, r := range append(body.Data, body.record) {
		if r.ID == "" || r.ExchangeRate == nil {
			continue
		}
		rate, err := decimal.NewFromString(r.ExchangeRate.String())
		if err != nil || !rate.IsPositive() {
			return nil, fmt.Errorf("balance transaction %s: exchange_rate %q is not a positive decimal", r.ID, r.ExchangeRate.String())
		}
		out[r.ID] = decimal.NewNullDecimal(rate)
	}
	return out, nil
}

func fromStripe(bt *stripego.BalanceTransaction) provider.BalanceTransaction {
	out := provider.BalanceTransaction{
		ID:                bt.ID,
		Type:              string(bt.Type),
		ReportingCategory: string(bt.ReportingCategory),
		Currency:          strings.ToLower(string(bt.Currency)),
		Amount:            bt.Amount,
		Fee:               bt.Fee,
		Net:               bt.Net,
		Created:           time.Unix(bt.Created, 0).UTC(),
	}
	if bt.Source != nil {
		out.SourceID = bt.Source.ID
	}
	return out
}

// Events lists every event created in [from, to), all pages. Each event's Payload is its JSON as it
// appeared in the listed page (stripe-go keeps the page's raw body; list
// items have no raw body of their own, and re-marshalling stripe-go's struct
// would drop the fields it does not model).
func (s *API) Events(ctx context.Context, from, to time.Time) ([]provider.ListedEvent, error) {
	params := &stripego.EventListParams{ListParams: s.listParams(ctx), CreatedRange: dayRange(from, to)}
	it := s.api.Events.List(params)
	out := []provider.ListedEvent{}
	var (
		page *stripego.EventList
		raw  map[string]json.RawMessage
	)
	for it.Next() {
		if l := it.EventList(); l != page {
			page = l
			var err error
			if raw, err = rawItems(l); err != nil {
				return nil, providerErr("list events", err)
			}
		}
		ev := it.Event()
		payload, ok := raw[ev.ID]
		if !ok {
			return nil, providerErr("list events", fmt.Errorf("event %s has no raw JSON in its page", ev.ID))
		}
		out = append(out, provider.ListedEvent{ID: ev.ID, Type: string(ev.Type), Created: time.Unix(ev.Created, 0).UTC(), Payload: payload})
		if len(out)%int(s.pageSize) == 0 {
			s.progress(fmt.Sprintf("listed %d events", len(out)))
		}
	}
	if err := it.Err(); err != nil {
		return nil, providerErr("list events", err)
	}
	return out, nil
}

// rawItems indexes a list page's data items by id, byte for byte as the page
// carried them.
func rawItems(l *stripego.EventList) (map[string]json.RawMessage, error) {
	if l.LastResponse == nil || len(l.LastResponse.RawJSON) == 0 {
		return nil, errors.New("list page without its raw body")
	}
	var page struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(l.LastResponse.RawJSON, &page); err != nil {
		return nil, fmt.Errorf("decode list page: %w", err)
	}
	out := make(map[string]json.RawMessage, len(page.Data))
	for _, item := range page.Data {
		var head struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(item, &head); err != nil {
			return nil, fmt.Errorf("decode list item: %w", err)
		}
		out[head.ID] = item
	}
	return out, nil
}
