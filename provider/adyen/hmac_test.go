package adyen_test

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

// vector is a signed notification item published by Adyen in the tests of
// one of its API libraries: the fields, the key and the signature their
// validators expect. Only the values are taken.
type vector struct {
	source  string // repository and file the values come from
	key     string // hex, as the Customer Area shows it
	item    adyen.Item
	signing string
	sig     string
}

func int64p(v int64) *int64 { return &v }

func mkItem(psp, orig, account, ref string, value *int64, currency, code, success string) adyen.Item {
	var it adyen.Item
	it.PspReference, it.OriginalReference = psp, orig
	it.MerchantAccountCode, it.MerchantReference = account, ref
	it.Amount.Value, it.Amount.Currency = value, currency
	it.EventCode, it.Success = code, success
	return it
}

var vectors = []vector{
	{
		source:  "github.com/Adyen/adyen-go-api-library src/hmacvalidator/hmacvalidator_test.go",
		key:     "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00",
		item:    mkItem("pspReference", "originalReference", "merchantAccount", "reference", int64p(1000), "EUR", "EVENT", "true"),
		signing: "pspReference:originalReference:merchantAccount:reference:1000:EUR:EVENT:true",
		sig:     "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc=",
	},
	{
		source:  "github.com/Adyen/adyen-node-api-library src/__tests__/hmacValidator.spec.ts",
		key:     "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00",
		item:    mkItem("pspReference", "originalReference", "merchantAccount", "reference", int64p(1000), "EUR", "REPORT_AVAILABLE", "true"),
		signing: "pspReference:originalReference:merchantAccount:reference:1000:EUR:REPORT_AVAILABLE:true",
		sig:     "ZNBPtI+oDyyRrLyD1XirkKnQgIAlFc07Vj27TeHsDRE=",
	},
	{
		// testValidateHMAC: no originalReference, an amount of 0.
		source:  "github.com/Adyen/adyen-java-api-library src/test/java/com/adyen/util/HMACValidatorTest.java",
		key:     "9064450A8892A093D9E97EFCC9639DE31B74F3A7803135555A3C96F5A57915D6",
		item:    mkItem("test_REPORT_AVAILABLE", "", "Magento2Rik", "testMerchantRef1", int64p(0), "EUR", "REPORT_AVAILABLE", "true"),
		signing: "test_REPORT_AVAILABLE::Magento2Rik:testMerchantRef1:0:EUR:REPORT_AVAILABLE:true",
		sig:     "NuEkADFmlCC6VgX+wcoPAegIWxVPNBPCuKlM4Hzo5qc=",
	},
	{
		// testValidateHMACWithoutEscaping: a real AUTHORISATION whose
		// merchantReference holds ':' and '\', signed as is.
		source:  "github.com/Adyen/adyen-java-api-library src/test/resources/mocks/hmac-validation-webhook.json (key from src/test/java/com/adyen/util/HMACValidatorTest.java)",
		key:     "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174",
		item:    mkItem("ZVWN7D3WSMK2WN82", "", "AntoniStroinski", `\:/\/slashes are fun`, int64p(1000), "EUR", "AUTHORISATION", "true"),
		signing: `ZVWN7D3WSMK2WN82::AntoniStroinski:\:/\/slashes are fun:1000:EUR:AUTHORISATION:true`,
		sig:     "CZErGCNQaSsxbaQfZaJlakqo7KPP+mIa8a+wx3yNs9A=",
	},
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

func withSignature(it adyen.Item, sig any) adyen.Item {
	ad := map[string]any{}
	for k, v := range it.AdditionalData {
		ad[k] = v
	}
	ad["hmacSignature"] = sig
	it.AdditionalData = ad
	return it
}

func TestPublishedVectors(t *testing.T) {
	t.Parallel()
	other := mustHex(t, strings.Repeat("AB", 32))
	for _, v := range vectors {
		t.Run(v.item.EventCode+"/"+v.item.PspReference, func(t *testing.T) {
			t.Parallel()
			key := mustHex(t, v.key)
			require.Equal(t, v.signing, v.item.SigningString(), "signing string (%s)", v.source)
			require.Equal(t, v.sig, adyen.Sign(v.item, key), "signature (%s)", v.source)

			signed := withSignature(v.item, v.sig)
			require.NoError(t, adyen.Verify(signed, [][]byte{key}))
			require.NoError(t, adyen.Verify(signed, [][]byte{other, key}), "the matching key second in a rotation")
			require.NoError(t, adyen.Verify(signed, [][]byte{key, other}), "the matching key first")
			require.ErrorIs(t, adyen.Verify(signed, [][]byte{other}), provider.ErrUnauthenticated)

			// The other published negative cases: a wrong signature, one of
			// the right length that decodes to 33 bytes, none at all, an
			// empty one, one that is not a string.
			for _, bad := range []any{"InvalidSignature", "notValidSign", strings.Repeat("A", 44), "", 12345, nil} {
				require.ErrorIs(t, adyen.Verify(withSignature(v.item, bad), [][]byte{key}), provider.ErrUnauthenticated, "hmacSignature %v", bad)
			}
			require.ErrorIs(t, adyen.Verify(v.item, [][]byte{key}), provider.ErrUnauthenticated, "no additionalData")
			noSig := v.item
			noSig.AdditionalData = map[string]any{"someOtherKey": "someValue"}
			require.ErrorIs(t, adyen.Verify(noSig, [][]byte{key}), provider.ErrUnauthenticated)
		})
	}
}

func TestSigningStringWithoutAmount(t *testing.T) {
	t.Parallel()
	// HMACValidatorTest.testValidateHMACMissingOptionalField
	// (github.com/Adyen/adyen-java-api-library): an item with no amount
	// signs two empty fields, not a 0.
	it := mkItem("test_REPORT_AVAILABLE", "", "Magento2Rik", "testMerchantRef1", nil, "", "REPORT_AVAILABLE", "true")
	require.Equal(t, "test_REPORT_AVAILABLE::Magento2Rik:testMerchantRef1:::REPORT_AVAILABLE:true", it.SigningString())
	withZero := it
	withZero.Amount.Value = int64p(0)
	require.NotEqual(t, it.SigningString(), withZero.SigningString())
}

func TestVerifyNeedsAKey(t *testing.T) {
	t.Parallel()
	v := vectors[0]
	signed := withSignature(v.item, v.sig)
	require.ErrorIs(t, adyen.Verify(signed, nil), provider.ErrNotConfigured)
	require.ErrorIs(t, adyen.Verify(signed, [][]byte{{}}), provider.ErrNotConfigured)

	// An empty key signs for anyone: it is never used, even next to a real
	// one.
	forged := withSignature(v.item, adyen.Sign(v.item, nil))
	require.ErrorIs(t, adyen.Verify(forged, [][]byte{{}, mustHex(t, v.key)}), provider.ErrUnauthenticated)
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	a := "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"
	b := "9064450A8892A093D9E97EFCC9639DE31B74F3A7803135555A3C96F5A57915D6"
	for _, tc := range []struct {
		csv  string
		want []string
	}{
		{"", nil},
		{"  ", nil},
		{a, []string{a}},
		{strings.ToLower(a), []string{a}},
		{a + "," + b, []string{a, b}},
		{" " + a + " ,\t" + b + " ", []string{a, b}},
	} {
		keys, err := adyen.ParseKeys(tc.csv)
		require.NoError(t, err, "%q", tc.csv)
		require.Len(t, keys, len(tc.want), "%q", tc.csv)
		for i, w := range tc.want {
			require.Equal(t, mustHex(t, w), keys[i], "%q key %d", tc.csv, i)
		}
	}

	for _, tc := range []struct {
		csv, says string
	}{
		{a + ",", "key 2 of 2 is empty"},
		{"," + a, "key 1 of 2 is empty"},
		{a + ",," + b, "key 2 of 3 is empty"},
		{"ZZ" + a[2:], "key 1 of 1 is not hex"},
		{a[:63], "key 1 of 1 is not hex"},
		{a + "," + b[:32], "key 2 of 2 is 16 bytes, not 32"},
		{a + "00", "is 33 bytes"},
		{"0x" + a, "not hex"},
	} {
		_, err := adyen.ParseKeys(tc.csv)
		require.ErrorIs(t, err, adyen.ErrInvalidConfig, "%q", tc.csv)
		require.Contains(t, err.Error(), tc.says)
		for _, part := range strings.Split(tc.csv, ",") {
			if len(part) >= 8 {
				require.NotContains(t, strings.ToUpper(err.Error()), strings.ToUpper(part[:8]), "the error echoes the key")
			}
		}
	}
}
