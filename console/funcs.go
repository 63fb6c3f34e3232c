package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

var funcs = template.FuncMap{
	// tone maps a status to its colour class: green settled, amber waiting,
	// red needs someone, grey closed.
	"tone": func(v any) string {
		switch strings.ToLower(fmt.Sprint(v)) {
		case "processed", "succeeded", "completed", "sent", "matched", "true", "balanced", "fee_posted":
			return "good"
		case "received", "running", "pending", "requested", "submitted", "requires_capture", "processing", "partially_refunded", "timing_difference":
			return "wait"
		case "poison", "failed", "dispute_lost", "disputed", "false", "missing_in_ledger", "missing_at_provider", "amount_mismatch", "mismatch", "unbalanced", "currency_mismatch":
			return "bad"
		default:
			return "muted"
		}
	},
	"when": func(v any) string {
		switch t := v.(type) {
		case time.Time:
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		case *time.Time:
			if t == nil || t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return fmt.Sprint(v)
	},
	// str shows a nullable value, "—" for null.
	"str": func(v any) string {
		switch s := v.(type) {
		case *string:
			if s == nil || *s == "" {
				return "—"
			}
			return *s
		case string:
			if s == "" {
				return "—"
			}
			return s
		case nil:
			return "—"
		}
		return fmt.Sprint(v)
	},
	"short": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
	"list": func(v ...string) []string { return v },
	"deref": func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	},
}
