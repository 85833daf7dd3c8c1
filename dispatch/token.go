package dispatch

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// Token prefixes: a worker's bearer token and an offer's callback token. Both carry 32 random
// bytes (256 bits), so a plain sha256 is the right hash: no KDF, lookups by hash, and comparison
// timing reveals nothing.
const (
	WorkerTokenPrefix   = "qlw_"
	CallbackTokenPrefix = "qlc_"
	tokenBytes          = 32
)

// NewWorkerToken returns a new worker token and its hash. The token is shown once to the
// operator; only the hash is stored (worker_tokens.token_hash).
func NewWorkerToken() (token, hash string, err error) { return newToken(WorkerTokenPrefix) }

// NewCallbackToken returns a new callback token and its hash (attempts.callback_token_hash).
// The token travels once, in the offer.
func NewCallbackToken() (token, hash string, err error) { return newToken(CallbackTokenPrefix) }

func newToken(prefix string) (string, string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("generate token: %w", err)
	}
	t := prefix + base64.RawURLEncoding.EncodeToString(b)
	return t, HashToken(t), nil
}

// HashToken is the stored form of a token: lowercase hex sha256 of its text.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// WellFormed reports whether token has the shape of a token with prefix (prefix + 43
// base64url characters). A malformed token is refused before any database work.
func WellFormed(token, prefix string) bool {
	rest, ok := strings.CutPrefix(token, prefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(tokenBytes) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}
