package adyensim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

var defaultClient = &http.Client{Timeout: 10 * time.Second}

type wrapper struct {
	NotificationRequestItem Item `json:"NotificationRequestItem"`
}

type batch struct {
	Live              string    `json:"live"`
	NotificationItems []wrapper `json:"notificationItems"`
}

// Batch is the body of a standard webhook delivering items, in order:
// {"live":"false","notificationItems":[{"NotificationRequestItem":{…}},…]}
// (live a string, as Adyen sends it). Items are written as they are, so a
// tampered item stays tampered.
func (s *Sim) Batch(live bool, items ...Item) []byte {
	b := batch{Live: fmt.Sprint(live), NotificationItems: make([]wrapper, len(items))}
	for i, it := range items {
		b.NotificationItems[i] = wrapper{it}
	}
	out, err := json.Marshal(b)
	if err != nil {
		panic(fmt.Sprintf("adyensim: marshal batch: %v", err)) // strings and integers only
	}
	if s.escape {
		// '/' can only stand inside a JSON string, so this changes no
		// structure.
		out = bytes.ReplaceAll(out, []byte("/"), []byte(`\/`))
	}
	return out
}

// Deliver POSTs items as one batch (live as Config.Live) to url as Adyen's
// webhook delivery does: Content-Type application/json and, when basicAuth
// ("user:password") is not empty, Basic auth. It returns the response,
// whose body the caller closes; Adyen counts a batch delivered only on a
// 2xx answering "[accepted]". It fails when the request cannot be sent.
func (s *Sim) Deliver(ctx context.Context, url, basicAuth string, items ...Item) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(s.Batch(s.live, items...)))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Adyen HttpClient 1.0")
	if basicAuth != "" {
		user, pass, _ := strings.Cut(basicAuth, ":")
		req.SetBasicAuth(user, pass)
	}
	res, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("deliver to %s: %w", url, err)
	}
	return res, nil
}
