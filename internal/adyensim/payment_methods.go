package adyensim

import (
	"encoding/json"
	"io"
	"net/http"
)

// servePaymentMethods answers POST CheckoutPath/paymentMethods with the
// checks every Checkout call makes, the X-API-Key (401) and the merchant
// account (403), then an empty list: the cheapest authenticated call
// there is, which `paygate doctor` makes to check its credentials. It
// changes nothing and is not counted among the refund calls.
func (s *Sim) servePaymentMethods(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest))
	if err != nil {
		return
	}
	s.mu.Lock()
	apiKey, merchant := s.checkout.apiKey, s.merchant
	s.mu.Unlock()
	if r.Header.Get("X-API-Key") != apiKey {
		writeAnswer(w, "", http.StatusUnauthorized, errorBody(ServiceError{Status: 401, ErrorCode: "000",
			Message: "HTTP Status Response - Unauthorized", ErrorType: "security"}))
		return
	}
	var req struct {
		MerchantAccount string `json:"merchantAccount"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeAnswer(w, "", http.StatusBadRequest, errorBody(ServiceError{Status: 400, ErrorCode: "702",
			Message: "Structure of PaymentMethodsRequest contains the following unknown fields or is not valid JSON", ErrorType: "validation"}))
		return
	}
	if req.MerchantAccount != merchant {
		writeAnswer(w, "", http.StatusForbidden, errorBody(ServiceError{Status: 403, ErrorCode: "901",
			Message: "Invalid Merchant Account", ErrorType: "security"}))
		return
	}
	writeAnswer(w, "", http.StatusOK, []byte(`{"paymentMethods":[]}`))
}
