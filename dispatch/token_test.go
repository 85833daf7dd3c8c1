package dispatch_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/dispatch"
)

func TestTokens(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		gen    func() (string, string, error)
	}{{dispatch.WorkerTokenPrefix, dispatch.NewWorkerToken}, {dispatch.CallbackTokenPrefix, dispatch.NewCallbackToken}} {
		a, ha, err := tc.gen()
		if err != nil {
			t.Fatal(err)
		}
		b, _, _ := tc.gen()
		sum := sha256.Sum256([]byte(a))
		switch {
		case !strings.HasPrefix(a, tc.prefix) || len(a) != len(tc.prefix)+43:
			t.Errorf("token %q…: want %s + 43 base64url characters", a[:6], tc.prefix)
		case a == b:
			t.Error("two tokens are equal")
		case ha != hex.EncodeToString(sum[:]) || ha != dispatch.HashToken(a):
			t.Error("hash is not the hex sha256 of the token")
		case !dispatch.WellFormed(a, tc.prefix) || dispatch.WellFormed(a[:len(a)-1], tc.prefix) || dispatch.WellFormed("x"+a[1:], tc.prefix):
			t.Error("WellFormed misjudges a token")
		}
	}
}

func TestConfigBounds(t *testing.T) {
	if err := (dispatch.Config{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		field string
		set   func(*dispatch.Config)
	}{
		{"OfferTTL", func(c *dispatch.Config) { c.OfferTTL = 999 * time.Millisecond }},
		{"OfferTTL", func(c *dispatch.Config) { c.OfferTTL = 5*time.Minute + 1 }},
		{"LeaseTTL", func(c *dispatch.Config) { c.LeaseTTL = 4 * time.Second }},
		{"LeaseTTL", func(c *dispatch.Config) { c.LeaseTTL, c.SweepInterval = 6*time.Second, 3*time.Second }},
		{"PollMaxWait", func(c *dispatch.Config) { c.PollMaxWait = 61 * time.Second }},
		{"PlacementInterval", func(c *dispatch.Config) { c.PlacementInterval = time.Millisecond }},
		{"SweepInterval", func(c *dispatch.Config) { c.SweepInterval = 2 * time.Minute }},
		{"SweepBatch", func(c *dispatch.Config) { c.SweepBatch = 1025 }},
		{"MaxProjects", func(c *dispatch.Config) { c.MaxProjects = -1 }},
		{"ScanCap", func(c *dispatch.Config) { c.ScanCap = 2000 }},
		{"DrainTimeout", func(c *dispatch.Config) { c.DrainTimeout = 11 * time.Minute }},
	}
	for _, tc := range cases {
		c := (dispatch.Config{}).WithDefaults()
		tc.set(&c)
		var ce *dispatch.ConfigError
		if err := c.Validate(); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s out of bounds: %v", tc.field, err)
		}
	}
}
