package csvtext_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/csvtext"
)

func TestCell(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`=HYPERLINK("http://x.example","y")`: `'=HYPERLINK("http://x.example","y")`,
		"+1+cmd|' /C calc'!A0":               "'+1+cmd|' /C calc'!A0",
		"-2+3":                               "'-2+3",
		"@SUM(A1:A2)":                        "'@SUM(A1:A2)",
		"\t=1":                               "'\t=1",
		"\r=1":                               "'\r=1",
		"":                                   "",
		"ord-1042":                           "ord-1042",
		"order =1":                           "order =1",
		"'already":                           "'already",
	} {
		require.Equal(t, want, csvtext.Cell(in), "%q", in)
	}
}
