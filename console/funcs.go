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
		case "processed", "succeeded", "completed", "sent", "matched", "true", "balanced", "fee_posted", "closed", "resolved", "matched_manually":
			return "good"
		case "received", "running", "pending", "requested", "submitted", "requires_capture", "processing", "partially_refunded", "timing_difference",
			"open", "provider_error", "write_off":
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
	// scope names what a run reconciled: its day, or its provider's
	// settlement batch.
	"scope": runScope,
	// items counts a run's items from its summary.
	"items": func(summary map[reconcile.Status]int) int {
		n := 0
		for _, v := range summary {
			n += v
		}
		return n
	},
	"deref": deref,
	"money": money,
	// moneyOf shows a nullable amount, "—" for null.
	"moneyOf": func(amount *string, currency string) string {
		if amount == nil || *amount == "" {
			return "—"
		}
		return money(*amount, currency)
	},
}

// currencySymbols are the currencies whose symbol needs no code beside it,
// as Stripe's dashboard writes them; every other shows its code after the
// digits, which is never ambiguous.
var currencySymbols = map[string]string{"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥"}

// money shows an amount as the API wrote it (a decimal string at the
// currency's scale) for people, as Stripe's dashboard does: "$360.00",
// "-$1,212.50", "¥500", "1.234 KWD". The digits are the API's, untouched
// (grouped by thousands, never rounded or re-scaled); what is not a plain
// decimal is shown as it came. Unlike jobs.FormatAmount (emails), the sign
// goes before the symbol: lists show refunds and fees as negative amounts.
func money(amount, currency string) string {
	if amount == "" {
		return "—"
	}
	sign, digits := "", amount
	if rest, ok := strings.CutPrefix(amount, "-"); ok {
		sign, digits = "-", rest
	}
	whole, frac, hasFrac := strings.Cut(digits, ".")
	if whole == "" || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return strings.TrimSpace(amount + " " + strings.ToUpper(currency))
	}
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if hasFrac {
		b.WriteString("." + frac)
	}
	if sym, ok := currencySymbols[strings.ToLower(currency)]; ok {
		return sign + sym + b.String()
	}
	return strings.TrimSpace(sign + b.String() + " " + strings.ToUpper(currency))
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

// runScope names what a run reconciled: "2025-03-14" for a day's run,
// "batch 12" for a settlement batch's.
func runScope(date *string, batch *int64) string {
	switch {
	case batch != nil:
		return fmt.Sprintf("batch %d", *batch)
	case date != nil:
		return *date
	}
	return "—"
}
