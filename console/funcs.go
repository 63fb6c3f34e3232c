package console

import (
	"fmt"
	"html/template"
	"reflect"
	"strings"
	"time"

	"github.com/paygate/paygate/reconcile"
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
	// str shows a nullable value, "—" for null or empty.
	"str": func(v any) string {
		if s := deref(v); s != "" {
			return s
		}
		return "—"
	},
	"list": func(v ...string) []string { return v },
	// items counts a run's items from its summary.
	"items": func(summary map[reconcile.Status]int) int {
		n := 0
		for _, v := range summary {
			n += v
		}
		return n
	},
	"deref": deref,
}

// deref shows what a nullable field holds, "" for null.
func deref(v any) string {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return ""
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return ""
	}
	return fmt.Sprint(rv.Interface())
}
