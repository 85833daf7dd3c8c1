package dbconn

// The helpers of the redaction tests, for the external ones (auth_test.go).
var (
	ClearPGEnv    = clearPGEnv
	EncodeAll     = encodeAll
	KVQuote       = kvQuote
	AssertNoPiece = assertNoPiece
)
