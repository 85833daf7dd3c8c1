package main

import (
	"fmt"
	"strings"
)

// msFixed renders a measured time in milliseconds (a lag, an age, a time to expiry, an offset)
// at a fixed width, so a column of them lines up: always three decimals of seconds, minutes
// and hours zero-padded, left-padded to the width of the largest value of its magnitude:
// " 0.950s", "12.345s", " 1m02.345s", "1h02m03.456s". sign is put before the digits ("+" for
// an offset); a negative d is signed "-". time.Duration's String drops trailing zeros and
// switches units below a second ("1.2s", "1.234s", "950ms"), so its widths wander.
func msFixed(d int64, sign string) string {
	if d < 0 {
		d, sign = -d, "-"
	}
	h, m, s, frac := d/3600000, d/60000%60, d/1000%60, d%1000
	var body string
	width := 0
	switch {
	case h > 0:
		body = fmt.Sprintf("%dh%02dm%02d.%03ds", h, m, s, frac)
	case m > 0:
		body, width = fmt.Sprintf("%dm%02d.%03ds", m, s, frac), len("59m59.999s")
	default:
		body, width = fmt.Sprintf("%d.%03ds", s, frac), len("59.999s")
	}
	if pad := width - len(body); pad > 0 {
		return strings.Repeat(" ", pad) + sign + body
	}
	return sign + body
}

// paren puts s in parentheses with its left padding outside them: " 0.950s ago" becomes
// " (0.950s ago)", so the parentheses sit next to the digits and the width stays.
func paren(s string) string {
	t := strings.TrimLeft(s, " ")
	return s[:len(s)-len(t)] + "(" + t + ")"
}
