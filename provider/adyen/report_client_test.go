package adyen_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

const reportPath = "/reports/download/MerchantAccount/M/settlement_detail_report_batch_4.csv"

// reportHost is a report server that counts the requests reaching it and
// answers with handler.
func reportHost(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func reportClient(t *testing.T, hosts ...string) *adyen.ReportClient {
	t.Helper()
	c, err := adyen.NewReportClient(adyen.ReportClientConfig{User: "report@Company.Paygate", Password: "s3cret",
		Hosts: hosts, PublicAddress: delivery.PublicAddress, MaxBytes: 64})
	require.NoError(t, err)
	return c
}

func TestReportClientDownloadsWithBasicAuth(t *testing.T) {
	t.Parallel()
	srv, n := reportHost(t, func(w http.ResponseWriter, r *http.Request) {
		user, password, ok := r.BasicAuth()
		if !ok || user != "report@Company.Paygate" || password != "s3cret" || r.URL.Path != reportPath {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("Type,Batch Number\n"))
	})
	host := strings.TrimPrefix(srv.URL, "http://")
	body, err := reportClient(t, host).Download(context.Background(), srv.URL+reportPath)
	require.NoError(t, err, "a host named by address may be private, and plain http")
	require.Equal(t, "Type,Batch Number\n", string(body))
	require.Equal(t, int64(1), n.Load())
}

// TestReportClientRefusals: a URL the configuration does not allow is
// refused before anything is fetched, for good (ErrPermanent); a failure
// of the host is an error a retry may fix.
func TestReportClientRefusals(t *testing.T) {
	t.Parallel()
	srv, n := reportHost(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/broken":
			http.Error(w, "oops", http.StatusInternalServerError)
		case "/large":
			_, _ = w.Write([]byte(strings.Repeat("x", 65)))
		default:
			_, _ = w.Write([]byte("ok"))
		}
	})
	u, _ := url.Parse(srv.URL)
	port := u.Port()
	ctx := context.Background()

	refused := func(c *adyen.ReportClient, raw, why string) {
		t.Helper()
		before := n.Load()
		_, err := c.Download(ctx, raw)
		require.ErrorIs(t, err, adyen.ErrReportRefused, why)
		require.ErrorIs(t, err, provider.ErrPermanent, why)
		require.Equal(t, before, n.Load(), "%s: nothing fetched", why)
	}
	refused(reportClient(t), srv.URL+reportPath, "the default hosts are Adyen's")
	refused(reportClient(t, "127.0.0.1"), srv.URL+reportPath, "another port than the entry's")
	refused(reportClient(t, "127.0.0.1:"+port), "http://user:pw@127.0.0.1:"+port+reportPath, "credentials in the URL")
	refused(reportClient(t, "localhost:"+port), "http://localhost:"+port+reportPath, "plain http to a host named by name")
	refused(reportClient(t, "localhost:"+port), "https://localhost:"+port+reportPath,
		"a name that resolves to a private address is refused when connecting")
	refused(reportClient(t, "ca-test.adyen.com"), "ftp://ca-test.adyen.com"+reportPath, "another scheme")

	// Plain http is refused before connecting to a host named by name,
	// whatever it resolves to.
	err := reportClient(t).Check("http://ca-live.adyen.com" + reportPath)
	require.ErrorIs(t, err, adyen.ErrReportRefused)
	require.ErrorContains(t, err, "plain http")
	require.NoError(t, reportClient(t).Check("https://ca-live.adyen.com"+reportPath))
	require.NoError(t, reportClient(t).Check("https://CA-TEST.adyen.com:443"+reportPath), "host names are case-insensitive")

	named := reportClient(t, "127.0.0.1:"+port)
	_, err = named.Download(ctx, srv.URL+"/moved")
	require.ErrorIs(t, err, provider.ErrAPI, "a redirect is not followed")
	require.NotErrorIs(t, err, provider.ErrPermanent, "a redirect may be retried")
	_, err = named.Download(ctx, srv.URL+"/broken")
	require.ErrorIs(t, err, provider.ErrAPI)
	require.NotErrorIs(t, err, provider.ErrPermanent)
	require.Contains(t, err.Error(), "HTTP 500")
	_, err = named.Download(ctx, srv.URL+"/large")
	require.ErrorIs(t, err, adyen.ErrReportTooLarge, "64 bytes at most")
	require.ErrorIs(t, err, provider.ErrPermanent)
	body, err := named.Download(ctx, srv.URL+"/small")
	require.NoError(t, err)
	require.Equal(t, "ok", string(body))
}

func TestReportClientConfiguration(t *testing.T) {
	t.Parallel()
	hosts, err := adyen.ParseReportHosts(" ca-test.adyen.com, 127.0.0.1:8443 ,[::1]:9000,")
	require.NoError(t, err)
	require.Equal(t, []string{"ca-test.adyen.com", "127.0.0.1:8443", "[::1]:9000"}, hosts)
	for _, bad := range []string{"https://ca-test.adyen.com", "ca-test.adyen.com:0", "ca-test.adyen.com:x", "user@host", "host/path"} {
		_, err := adyen.ParseReportHosts(bad)
		require.Error(t, err, bad)
	}
	_, err = adyen.NewReportClient(adyen.ReportClientConfig{User: "u", Password: "p"})
	require.ErrorIs(t, err, adyen.ErrAPIConfig, "the address rule is required")
	_, err = adyen.NewReportClient(adyen.ReportClientConfig{User: "u", PublicAddress: delivery.PublicAddress})
	require.ErrorIs(t, err, adyen.ErrAPIConfig, "a password is required")
}
