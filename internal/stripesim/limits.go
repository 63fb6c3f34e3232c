package stripesim

import (
	"maps"
	"net/http"
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

// limitState is what the API keeps about its callers: the requests it
// answered per route and the rate limits tests queued. Sim.mu guards it.
type limitState struct {
	requests    map[string]int
	limited     int
	shouldRetry string
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
