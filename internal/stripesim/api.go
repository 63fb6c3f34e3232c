package stripesim

import (
	"cmp"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Handler serves the part of Stripe's API that reconciliation reads, and
// the refunds paygate asks for:
//
//	GET /v1/events                      list, newest first
//	GET /v1/events/{id}
//	GET /v1/balance_transactions        list, newest first
//	GET /v1/balance_transactions/{id}
//	POST /v1/refunds                    form-encoded, behind Stripe's idempotency layer
//
// Lists answer Stripe's envelope {"object":"list","data":[…],"has_more",
// "url"} and take limit (1–100, default 10), starting_after, ending_before,
// created / created[gt|gte|lt|lte]; events also type (with * wildcards) and
// types[]; balance transactions also payout, type, source and currency.
// Events are listed, and retrieved, as the account's API version rendered
// them (Event.APIPayload), and only those of the 30 days before the
// simulator's clock, as Stripe keeps them (EventRetention).
// Unknown parameters are refused, as Stripe refuses them. Every request
// needs the API key, as a Bearer token or as the basic-auth user (stripe-go
// sends either); otherwise 401. Errors have Stripe's shape
// {"error":{"type":"invalid_request_error","message":…}}. Requests are
// counted per route (Requests); RateLimitNext answers the next ones 429
// as Stripe's rate limiter does, and FailNext with any status.
//
// POST /v1/refunds takes payment_intent or charge, amount, reason and
// metadata[…], and refunds as Sim.Refund does (the same objects and
// events), with Stripe's refusals (amount_too_large,
// charge_already_refunded, resource_missing…). It honours Idempotency-Key
// as Stripe does: the first request with a key runs and its answer, error
// or not, is stored; a retry with the same parameters gets it again with
// Idempotent-Replayed: true, other parameters get 400 idempotency_error,
// and a retry while the first still runs 409 idempotency_key_in_use.
// Requests that fail validation store nothing; keys expire
// IdempotencyKeyTTL after their first use. RefuseNextRefund,
// FailNextRefundRequest and DelayRefundAnswer make it misbehave.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/events", s.listEvents)
	mux.HandleFunc("GET /v1/events/{id}", s.getEvent)
	mux.HandleFunc("GET /v1/balance_transactions", s.listBalanceTransactions)
	mux.HandleFunc("GET /v1/balance_transactions/{id}", s.getBalanceTransaction)
	mux.HandleFunc("POST /v1/refunds", s.createRefund)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, apiError{
			Message: fmt.Sprintf("Unrecognized request URL (%s: %s).", r.Method, r.URL.Path),
		})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Request-Id", fmt.Sprintf("req_stripesim_%d", s.reqSeq.Add(1)))
		w.Header().Set("Stripe-Version", APIVersion)
		_, pattern := mux.Handler(r)
		s.countRequest(pattern)
		if msg, ok := s.authorize(r); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="Stripe"`)
			writeError(w, http.StatusUnauthorized, apiError{Message: msg})
			return
		}
		if s.rateLimited(w) || s.failed(w, pattern) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Start serves Handler on a local httptest server closed at the end of the
// test; pass the server's URL to stripe-go as the backend URL.
func (s *Sim) Start(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func (s *Sim) authorize(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').", false
	}
	var key string
	if k, ok := strings.CutPrefix(h, "Bearer "); ok {
		key = strings.TrimSpace(k)
	} else if user, _, ok := r.BasicAuth(); ok {
		key = user
	} else {
		return "Invalid API Key provided: the Authorization header must use Bearer or Basic auth.", false
	}
	if subtle.ConstantTimeCompare([]byte(key), []byte(s.apiKey)) != 1 {
		return "Invalid API Key provided: " + redactKey(key), false
	}
	return "", true
}

// redactKey masks a key as Stripe does in its error messages.
func redactKey(k string) string {
	if len(k) <= 12 {
		return "****"
	}
	return k[:8] + "****" + k[len(k)-4:]
}

type apiError struct {
	Code    string `json:"code,omitempty"`
	DocURL  string `json:"doc_url,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Type    string `json:"type"`
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	if e.Type == "" {
		e.Type = "invalid_request_error"
	}
	writeJSON(w, status, map[string]apiError{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// listQuery is the parameters every Stripe list endpoint shares.
type listQuery struct {
	limit         int
	startingAfter string
	endingBefore  string
	created       map[string]int64 // "eq", "gt", "gte", "lt", "lte"
}

func (q listQuery) inRange(created int64) bool {
	for op, v := range q.created {
		ok := true
		switch op {
		case "eq":
			ok = created == v
		case "gt":
			ok = created > v
		case "gte":
			ok = created >= v
		case "lt":
			ok = created < v
		case "lte":
			ok = created <= v
		}
		if !ok {
			return false
		}
	}
	return true
}

// parseList reads the shared list parameters; extra names the
// endpoint-specific ones it accepts (a trailing "[" accepts the name with any
// index, as in types[0]).
func parseList(r *http.Request, extra ...string) (listQuery, *apiError) {
	q := listQuery{limit: 10, created: map[string]int64{}}
	vals := r.URL.Query()
	for name, vs := range vals {
		v := vs[len(vs)-1]
		switch name {
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil {
				return q, &apiError{Code: "parameter_invalid_integer", Param: name, Message: "Invalid integer: " + v}
			}
			if n < 1 || n > 100 {
				return q, &apiError{Code: "parameter_invalid_integer", Param: name, Message: fmt.Sprintf("This value must be between 1 and 100 (it currently is %d).", n)}
			}
			q.limit = n
		case "starting_after":
			q.startingAfter = v
		case "ending_before":
			q.endingBefore = v
		case "created", "created[gt]", "created[gte]", "created[lt]", "created[lte]":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return q, &apiError{Code: "parameter_invalid_integer", Param: name, Message: "Invalid integer: " + v}
			}
			op := "eq"
			if name != "created" {
				op = strings.TrimSuffix(strings.TrimPrefix(name, "created["), "]")
			}
			q.created[op] = n
		default:
			if !knownParam(name, extra) {
				return q, &apiError{Code: "parameter_unknown", Param: name, Message: "Received unknown parameter: " + name}
			}
		}
	}
	if q.startingAfter != "" && q.endingBefore != "" {
		return q, &apiError{Message: "You may only specify one of these parameters: ending_before, starting_after."}
	}
	return q, nil
}

func knownParam(name string, extra []string) bool {
	if strings.HasPrefix(name, "expand[") || name == "expand" {
		return true
	}
	for _, e := range extra {
		if name == e || (strings.HasSuffix(e, "[") && strings.HasPrefix(name, e)) {
			return true
		}
	}
	return false
}

// listItem is one object in a list, with its position: lists are ordered by
// created, newest first, and by creation order (seq) among equal timestamps.
type listItem struct {
	id      string
	created int64
	seq     int
}

func newerFirst(a, b listItem) int {
	if c := cmp.Compare(b.created, a.created); c != 0 {
		return c
	}
	return cmp.Compare(b.seq, a.seq)
}

// paginate cuts one page out of all (every object of the kind, in creation
// order), keeping those keep accepts, and returns the page's seqs. A cursor
// is located among all objects, so it stays valid even when filters hide the
// cursor object itself.
func paginate(all []listItem, keep func(seq int) bool, q listQuery, noun string) ([]int, bool, *apiError) {
	// Created only goes backwards if the script set the clock back.
	slices.Reverse(all)
	if !slices.IsSortedFunc(all, newerFirst) {
		slices.SortFunc(all, newerFirst)
	}
	cursorID, param := q.startingAfter, "starting_after"
	if q.endingBefore != "" {
		cursorID, param = q.endingBefore, "ending_before"
	}
	var cursor *listItem
	if cursorID != "" {
		i := slices.IndexFunc(all, func(it listItem) bool { return it.id == cursorID })
		if i < 0 {
			return nil, false, &apiError{Code: "resource_missing", Param: param, Message: fmt.Sprintf("No such %s: '%s'", noun, cursorID)}
		}
		cursor = &all[i]
	}
	var kept []int
	for _, it := range all {
		if !q.inRange(it.created) || !keep(it.seq) {
			continue
		}
		if cursor != nil {
			c := newerFirst(it, *cursor)
			if q.startingAfter != "" && c <= 0 || q.endingBefore != "" && c >= 0 {
				continue
			}
		}
		kept = append(kept, it.seq)
		if q.endingBefore == "" && len(kept) > q.limit {
			break // one more than a page is enough to know has_more
		}
	}
	if q.endingBefore != "" {
		// The page is the limit items just before the cursor, still newest
		// first; has_more says there are newer ones beyond it.
		start := max(len(kept)-q.limit, 0)
		return kept[start:], start > 0, nil
	}
	n := min(q.limit, len(kept))
	return kept[:n], len(kept) > n, nil
}

type listEnvelope struct {
	Object  string `json:"object"`
	Data    []any  `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

func (s *Sim) listEvents(w http.ResponseWriter, r *http.Request) {
	q, perr := parseList(r, "type", "types[")
	if perr != nil {
		writeError(w, http.StatusBadRequest, *perr)
		return
	}
	vals := r.URL.Query()
	var patterns []string
	for name, vs := range vals {
		if strings.HasPrefix(name, "types[") {
			patterns = append(patterns, vs...)
		}
	}
	if t := vals.Get("type"); t != "" {
		if len(patterns) > 0 {
			writeError(w, http.StatusBadRequest, apiError{Message: "You may pass either `type` or `types`, but not both."})
			return
		}
		patterns = []string{t}
	}

	s.mu.Lock()
	all := make([]listItem, len(s.events))
	for i, ev := range s.events {
		all[i] = listItem{id: ev.ID, created: ev.Created.Unix(), seq: i}
	}
	oldest := s.now.Add(-EventRetention).Unix()
	keep := func(seq int) bool {
		if s.events[seq].Created.Unix() < oldest {
			return false
		}
		if len(patterns) == 0 {
			return true
		}
		for _, p := range patterns {
			if ok, _ := path.Match(p, string(s.events[seq].Type)); ok {
				return true
			}
		}
		return false
	}
	page, hasMore, perr := paginate(all, keep, q, "event")
	data := make([]any, len(page))
	for i, seq := range page {
		data[i] = json.RawMessage(s.events[seq].APIPayload)
	}
	s.mu.Unlock()

	if perr != nil {
		writeError(w, http.StatusBadRequest, *perr)
		return
	}
	writeJSON(w, http.StatusOK, listEnvelope{Object: "list", Data: data, HasMore: hasMore, URL: "/v1/events"})
}

func (s *Sim) getEvent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ev, ok := s.Event(id)
	if !ok {
		writeError(w, http.StatusNotFound, apiError{Code: "resource_missing", Param: "id", Message: fmt.Sprintf("No such event: '%s'", id)})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(ev.APIPayload)
}

func (s *Sim) listBalanceTransactions(w http.ResponseWriter, r *http.Request) {
	q, perr := parseList(r, "payout", "type", "source", "currency")
	if perr != nil {
		writeError(w, http.StatusBadRequest, *perr)
		return
	}
	vals := r.URL.Query()
	payoutID, typ, source, currency := vals.Get("payout"), vals.Get("type"), vals.Get("source"), strings.ToLower(vals.Get("currency"))

	s.mu.Lock()
	if _, ok := s.payouts[payoutID]; payoutID != "" && !ok {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, apiError{Code: "resource_missing", Param: "payout", Message: fmt.Sprintf("No such payout: '%s'", payoutID)})
		return
	}
	all := make([]listItem, 0, len(s.txns))
	for i, bt := range s.txns {
		if !s.dropped[bt.ID] {
			all = append(all, listItem{id: bt.ID, created: bt.Created, seq: i})
		}
	}
	keep := func(seq int) bool {
		bt := s.txns[seq]
		return (payoutID == "" || s.payoutOf[bt.ID] == payoutID) &&
			(typ == "" || string(bt.Type) == typ) &&
			(source == "" || bt.Source == source) &&
			(currency == "" || bt.Currency == currency)
	}
	page, hasMore, perr := paginate(all, keep, q, "balance transaction")
	data := make([]any, len(page))
	for i, seq := range page {
		data[i] = cloneTxn(s.txns[seq])
	}
	s.mu.Unlock()

	if perr != nil {
		writeError(w, http.StatusBadRequest, *perr)
		return
	}
	writeJSON(w, http.StatusOK, listEnvelope{Object: "list", Data: data, HasMore: hasMore, URL: "/v1/balance_transactions"})
}

func (s *Sim) getBalanceTransaction(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	bt, ok := s.BalanceTransaction(id)
	if !ok {
		writeError(w, http.StatusNotFound, apiError{Code: "resource_missing", Param: "id", Message: fmt.Sprintf("No such balance transaction: '%s'", id)})
		return
	}
	writeJSON(w, http.StatusOK, bt)
}
