package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A Run has one address: uuid.Parse also reads the uppercase, braced, urn:uuid: and unhyphenated
// forms, and the page answered each of them (five URLs for one Run, none of them the one the
// Run lists link to). The other forms are sent to the canonical one.
func TestRunPageHasOneAddress(t *testing.T) {
	t.Parallel()
	s := seed(t)
	l := seedLoop(t, s)
	id := l.failed.String()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, form := range []string{strings.ToUpper(id), "{" + id + "}", url.PathEscape("urn:uuid:" + id), strings.ReplaceAll(id, "-", "")} {
		res, err := client.Get(s.srv.URL + "/runs/" + form)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/runs/"+id {
			t.Errorf("GET /runs/%s: %d, Location %q; want 301 to /runs/%s", form, res.StatusCode, res.Header.Get("Location"), id)
		}
	}
	if r := get(t, s.srv.URL, "/runs/"+id); r.code != http.StatusOK {
		t.Errorf("GET /runs/%s: %d, want 200", id, r.code)
	}
	for _, p := range []string{"/runs/not-a-uuid", "/runs/" + strings.Repeat("a", 10000), "/runs/..%2f..%2fetc%2fpasswd",
		"/runs/" + url.PathEscape("<script>alert(1)</script>")} {
		if r := get(t, s.srv.URL, p); r.code != http.StatusBadRequest || strings.Contains(r.body, "<script>alert") {
			t.Errorf("GET %.60s: %d %q; want 400, escaped", p, r.code, errorMessage(r.body))
		}
	}
}
