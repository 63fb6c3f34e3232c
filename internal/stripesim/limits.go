package stripesim

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"
)

// rateLimitMessage is the message of Stripe's rate limiter, as it words it.
const rateLimitMessage = "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits."

// RateLimitOpts shapes the 429 answers of RateLimitNext.
type RateLimitOpts struct {
	// ShouldRetry is the Stripe-Should-Retry header sent with each answer:
	// "true", "false", or empty for none (what Stripe's rate limiter
	// sends; a client then decides on its own).
	ShouldRetry string
}

// EventRetention is how long GET /v1/events lists an event: "going back
// up to 30 days" (stripe-go v79's EventListParams).
const EventRetention = 30 * 24 * time.Hour

// limitState is what the API keeps about its callers: the requests it
// answered per route and the rate limits and failures tests queued.
// Sim.mu guards it.
type limitState struct {
	requests    map[string]int
	limited     int
	shouldRetry string
	failures    []FailOpts
}

// FailOpts shapes the answers of FailNext.
type FailOpts struct {
	// Status is the answer's status: 429 answers as Stripe's rate
	// limiter (code rate_limit), any other with an api_error.
	Status int
	// Route limits the failures to one route pattern, such as
	// "GET /v1/events"; empty: any.
	Route string
	// After lets this many requests (of Route) through first, so that a
	// test can fail a list in its middle.
	After int
	// ShouldRetry is the Stripe-Should-Retry header sent: "true",
	// "false", or empty for none.
	ShouldRetry string
}

// FailNext makes n API requests (of opts.Route, after opts.After of them
// went through) answer opts.Status with Stripe's error body, as an
// overloaded or failing Stripe does; nothing else happens for them. Calls
// queue: each one's failures come after the earlier ones'.
func (s *Sim) FailNext(n int, opts FailOpts) {
	if opts.Status < 400 {
		panic(fmt.Sprintf("stripesim: FailNext: status %d is not an error", opts.Status))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.limits.failures = append(s.limits.failures, opts)
	}
}

// StopFailing drops the failures FailNext queued and that have not
// happened yet: the API answers again.
func (s *Sim) StopFailing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits.failures = nil
}

// failed answers a request with the first queued failure that applies to
// its route, reporting whether it did.
func (s *Sim) failed(w http.ResponseWriter, pattern string) bool {
	s.mu.Lock()
	i := slices.IndexFunc(s.limits.failures, func(f FailOpts) bool { return f.Route == "" || f.Route == pattern })
	if i < 0 {
		s.mu.Unlock()
		return false
	}
	f := s.limits.failures[i]
	if f.After > 0 {
		// Let this request through; the failures queued with it wait
		// one request less.
		for j := range s.limits.failures {
			if s.limits.failures[j] == f {
				s.limits.failures[j].After--
			}
		}
		s.mu.Unlock()
		return false
	}
	s.limits.failures = slices.Delete(s.limits.failures, i, i+1)
	s.mu.Unlock()
	if f.ShouldRetry != "" {
		w.Header().Set("Stripe-Should-Retry", f.ShouldRetry)
	}
	if f.Status == http.StatusTooManyRequests {
		writeError(w, f.Status, apiError{Code: "rate_limit", DocURL: "https://stripe.com/docs/error-codes/rate-limit", Message: rateLimitMessage})
		return true
	}
	writeError(w, f.Status, apiError{Type: "api_error", Message: "An unknown error occurred. Please try again later."})
	return true
}

// RateLimitNext makes the next n API requests (any route, once past
// authentication) answer 429 with Stripe's rate-limit error body: type
// invalid_request_error, code rate_limit. Nothing else happens for them: a
// rate-limited request never reached the API. A later call replaces the
// earlier one; opts may be nil.
func (s *Sim) RateLimitNext(n int, opts *RateLimitOpts) {
	if opts == nil {
		opts = &RateLimitOpts{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits.limited, s.limits.shouldRetry = n, opts.ShouldRetry
}

// Requests returns how many API requests the simulator received per route,
// keyed by the route's pattern ("GET /v1/balance_transactions",
// "GET /v1/balance_transactions/{id}"; "/" for unknown URLs), whatever they
// were answered: rate-limited and unauthorized requests count too.
func (s *Sim) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.limits.requests)
}

// RequestCount is the total of Requests.
func (s *Sim) RequestCount() int {
	n := 0
	for _, c := range s.Requests() {
		n += c
	}
	return n
}

// countRequest counts a request under its route pattern.
func (s *Sim) countRequest(pattern string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limits.requests == nil {
		s.limits.requests = map[string]int{}
	}
	s.limits.requests[pattern]++
}

// rateLimited answers 429 when RateLimitNext asked for it, reporting
// whether it did.
func (s *Sim) rateLimited(w http.ResponseWriter) bool {
	s.mu.Lock()
	limited := s.limits.limited > 0
	shouldRetry := s.limits.shouldRetry
	if limited {
		s.limits.limited--
	}
	s.mu.Unlock()
	if !limited {
		return false
	}
	if shouldRetry != "" {
		w.Header().Set("Stripe-Should-Retry", shouldRetry)
	}
	writeError(w, http.StatusTooManyRequests, apiError{
		Code: "rate_limit", DocURL: "https://stripe.com/docs/error-codes/rate-limit", Message: rateLimitMessage,
	})
	return true
}
