package main

import "testing"

// Measured milliseconds print at one width per magnitude, three decimals always.
func TestMsFixedKeepsItsWidth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ms   int64
		sign string
		want string
	}{
		{0, "", " 0.000s"},
		{1, "", " 0.001s"},
		{950, "", " 0.950s"},
		{1200, "", " 1.200s"},
		{12345, "", "12.345s"},
		{59999, "", "59.999s"},
		{60000, "", " 1m00.000s"},
		{62345, "", " 1m02.345s"},
		{3599999, "", "59m59.999s"},
		{3723456, "", "1h02m03.456s"},
		{950, "+", " +0.950s"},
		{12345, "+", "+12.345s"},
		{-950, "", " -0.950s"},
	} {
		if got := msFixed(c.ms, c.sign); got != c.want {
			t.Errorf("msFixed(%d, %q) = %q; want %q", c.ms, c.sign, got, c.want)
		}
	}
}
