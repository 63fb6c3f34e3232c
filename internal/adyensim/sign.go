package adyensim

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
)

// SignatureField is the additionalData entry Adyen puts an item's HMAC in.
const SignatureField = "hmacSignature"

// Sign is the HMAC Adyen computes for it under key: HMAC-SHA256 of
// pspReference, originalReference, merchantAccountCode, merchantReference,
// amount value and currency, eventCode and success joined with ':'
// (nothing escaped), in standard base64.
func Sign(it Item, key []byte) string {
	data := it.PspReference + ":" + it.OriginalReference + ":" + it.MerchantAccountCode + ":" +
		it.MerchantReference + ":" + strconv.FormatInt(it.Amount.Value, 10) + ":" + it.Amount.Currency + ":" +
		it.EventCode + ":" + it.Success
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Sign returns it, with copied additionalData, signed with the Sim's key:
// after a test changes a signed field, the item is authentic again.
func (s *Sim) Sign(it Item) Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signLocked(it)
}

func (s *Sim) signLocked(it Item) Item {
	ad := make(map[string]string, len(it.AdditionalData)+1)
	for k, v := range it.AdditionalData {
		ad[k] = v
	}
	ad[SignatureField] = Sign(it, s.key)
	it.AdditionalData = ad
	return it
}
