package console_test

import (
	"net/http"
	"net/url"
	"testing"
)

func TestDebugRun(t *testing.T) {
	b := setup(t)
	c := client(t)
	postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {financeTok}})
	page := getPage(t, c, b.srv.URL+"/console/reconciliation")
	key, csrf := hidden(t, page, "start-run", "idempotency_key"), hidden(t, page, "start-run", "csrf")
	resp := postForm(t, c, b.srv.URL+"/console/reconciliation/runs", url.Values{"idempotency_key": {key}, "csrf": {csrf}, "date": {"2024-06-01"}})
	t.Log(resp.StatusCode, resp.Header.Get("Location"))
	r2, _ := c.Get(b.srv.URL + resp.Header.Get("Location"))
	buf := make([]byte, 20000)
	n, _ := r2.Body.Read(buf)
	t.Log(r2.StatusCode, string(buf[:n]))
	_ = http.MethodGet
}
