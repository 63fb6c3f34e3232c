package reliability

import (
	"fmt"
	"regexp"
	"strings"
)

// leakPatterns are what must never appear in a gateway's logs: the
// configured secrets and tokens, anything shaped like a Stripe-Signature
// header, and fragments only an event payload contains.
var leakPatterns = []struct {
	what string
	re   *regexp.Regexp
}{
	{"webhook secret", regexp.MustCompile(regexp.QuoteMeta(WebhookSecret))},
	{"rotated webhook secret", regexp.MustCompile(regexp.QuoteMeta(OldSecret))},
	{"any whsec_ secret", regexp.MustCompile(`whsec_[A-Za-z0-9_]+`)},
	{"ops token", regexp.MustCompile(regexp.QuoteMeta(OpsToken))},
	{"finance token", regexp.MustCompile(regexp.QuoteMeta(FinanceToken))},
	{"signature header name", regexp.MustCompile(`(?i)stripe-signature`)},
	{"signature timestamp", regexp.MustCompile(`\bt=\d{9,}`)},
	{"v1 signature", regexp.MustCompile(`v1=[0-9a-f]{16,}`)},
	{"provider API key", regexp.MustCompile(`[sr]k_(test|live)_[A-Za-z0-9]+`)},
	{"bearer credential", regexp.MustCompile(`(?i)bearer\s+[A-Za-z0-9._~+/-]{8,}`)},
	{"payload: customer email", regexp.MustCompile(`buyer-\d+@example\.test`)},
	{"payload: JSON object field", regexp.MustCompile(`\\?"object\\?"\s*:\s*\\?"(event|charge|payment_intent|refund|dispute|payout)`)},
	{"payload: amount field", regexp.MustCompile(`\\?"amount(_captured|_received|_refunded)?\\?"\s*:\s*-?\d`)},
	{"payload: billing details", regexp.MustCompile(`billing_details`)},
}

// Leak is a forbidden string found in logs.
type Leak struct {
	What string
	Line string // the offending line, the match masked
}

// ScanLogs returns every line of logs that contains a secret, a token, a
// signature or payload data: the harness's own secrets and tokens, the
// extra secrets given, and anything shaped like them.
func ScanLogs(logs string, secrets ...string) []Leak {
	var out []Leak
	for _, line := range strings.Split(logs, "\n") {
		for _, s := range secrets {
			if s != "" && strings.Contains(line, s) {
				out = append(out, Leak{What: "configured secret", Line: strings.ReplaceAll(line, s, "<configured secret>")})
			}
		}
		for _, p := range leakPatterns {
			if loc := p.re.FindStringIndex(line); loc != nil {
				masked := line[:loc[0]] + "<" + p.what + ">" + line[loc[1]:]
				if len(masked) > 300 {
					masked = masked[:300] + "…"
				}
				out = append(out, Leak{What: p.what, Line: masked})
			}
		}
	}
	return out
}

// String describes a leak.
func (l Leak) String() string { return fmt.Sprintf("%s: %s", l.What, l.Line) }
