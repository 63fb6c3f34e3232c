package delivery

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The vectors below were read from github.com/standard-webhooks/standard-webhooks
// at commit b2fa7b8719fb75d326b591077f5d1b385cfcdfae:
//   - libraries/go/webhook_test.go, TestWebhookSign (the same vector is in
//     the JavaScript, C#, Java and PHP libraries' tests);
//   - libraries/rust/src/lib.rs, test_sign.
const (
	vecGoSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecGoMsgID  = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecGoTS     = 1614265330
	vecGoBody   = `{"test": 2432232314}`
	vecGoSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

	vecRustSecret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	vecRustMsgID  = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk"
	vecRustTS     = 1649367553
	vecRustBody   = `{"email":"test@example.com","username":"test_user"}`
	vecRustSig    = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
)

func TestSign(t *testing.T) {
	t.Parallel()

	// The go vector's message signed with the rust vector's secret: the
	// second half of the rotation header, computed independently.
	rotatedGoMsg, err := Sign([]string{vecRustSecret}, vecGoMsgID, time.Unix(vecGoTS, 0), []byte(vecGoBody))
	require.NoError(t, err)
	require.NotEqual(t, vecGoSig, rotatedGoMsg)

	tests := []struct {
		name    string
		secrets []string
		msgID   string
		ts      time.Time
		body    string
		want    string
		wantErr error
	}{
		{
			name:    "standard webhooks go/js vector",
			secrets: []string{vecGoSecret}, msgID: vecGoMsgID, ts: time.Unix(vecGoTS, 0), body: vecGoBody,
			want: vecGoSig,
		},
		{
			name:    "standard webhooks rust vector",
			secrets: []string{vecRustSecret}, msgID: vecRustMsgID, ts: time.Unix(vecRustTS, 0), body: vecRustBody,
			want: vecRustSig,
		},
		{
			name:    "sub-second part of the timestamp is not signed",
			secrets: []string{vecGoSecret}, msgID: vecGoMsgID, ts: time.Unix(vecGoTS, 999_999_999), body: vecGoBody,
			want: vecGoSig,
		},
		{
			name:    "rotation: current first, previous after, one space",
			secrets: []string{vecGoSecret, vecRustSecret}, msgID: vecGoMsgID, ts: time.Unix(vecGoTS, 0), body: vecGoBody,
			want: vecGoSig + " " + rotatedGoMsg,
		},
		{
			name:    "rotation order is kept",
			secrets: []string{vecRustSecret, vecGoSecret}, msgID: vecGoMsgID, ts: time.Unix(vecGoTS, 0), body: vecGoBody,
			want: rotatedGoMsg + " " + vecGoSig,
		},
		{
			name:    "message id with a dot",
			secrets: []string{vecGoSecret}, msgID: "msg_a.b", ts: time.Unix(vecGoTS, 0), body: vecGoBody,
			wantErr: ErrInvalidMessageID,
		},
		{
			name:    "empty message id",
			secrets: []string{vecGoSecret}, msgID: "", ts: time.Unix(vecGoTS, 0), body: vecGoBody,
			wantErr: ErrInvalidMessageID,
		},
		{
			name:    "message id that would inject a header",
			secrets: []string{vecGoSecret}, msgID: "msg_1\r\nx-evil: 1", ts: time.Unix(vecGoTS, 0), body: vecGoBody,
			wantErr: ErrInvalidMessageID,
		},
		{
			name:    "no secrets",
			secrets: nil, msgID: vecGoMsgID, ts: time.Unix(vecGoTS, 0), body: vecGoBody,
			wantErr: ErrInvalidSecret,
		},
		{
			name:    "second secret invalid",
			secrets: []string{vecGoSecret, "whsec_short"}, msgID: vecGoMsgID, ts: time.Unix(vecGoTS, 0), body: vecGoBody,
			wantErr: ErrInvalidSecret,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Sign(tt.secrets, tt.msgID, tt.ts, []byte(tt.body))
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Empty(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeSecret(t *testing.T) {
	t.Parallel()

	enc := func(n int) string { return secretPrefix + base64.StdEncoding.EncodeToString(make([]byte, n)) }
	tests := []struct {
		name    string
		secret  string
		wantLen int // 0: want ErrInvalidSecret
	}{
		{name: "published vector, 24 bytes", secret: vecGoSecret, wantLen: 24},
		{name: "64 bytes", secret: enc(64), wantLen: 64},
		{name: "32 bytes", secret: enc(32), wantLen: 32},
		{name: "no prefix", secret: strings.TrimPrefix(vecGoSecret, secretPrefix)},
		{name: "other prefix", secret: "whsk_" + strings.TrimPrefix(vecGoSecret, secretPrefix)},
		{name: "prefix only", secret: secretPrefix},
		{name: "empty", secret: ""},
		{name: "bad base64", secret: secretPrefix + "not*base64!"},
		{name: "url-safe alphabet", secret: secretPrefix + strings.Repeat("-_", 16)},
		{name: "missing padding", secret: strings.TrimRight(enc(25), "=")},
		{name: "23 bytes", secret: enc(23)},
		{name: "65 bytes", secret: enc(65)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key, err := DecodeSecret(tt.secret)
			if tt.wantLen == 0 {
				require.ErrorIs(t, err, ErrInvalidSecret)
				require.Nil(t, key)
				if body := strings.TrimPrefix(tt.secret, secretPrefix); len(body) > 8 {
					require.NotContains(t, err.Error(), body, "errors must not repeat the secret")
				}
				return
			}
			require.NoError(t, err)
			require.Len(t, key, tt.wantLen)
		})
	}
}

func TestNewSecret(t *testing.T) {
	t.Parallel()

	a, err := NewSecret()
	require.NoError(t, err)
	b, err := NewSecret()
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "whsec_"))

	key, err := DecodeSecret(a)
	require.NoError(t, err)
	require.Len(t, key, 32)
	require.NotEqual(t, make([]byte, 32), key)
}
