// Package httpauth reads the credentials of bullpen's HTTP APIs, tells the
// admin token from the viewer token, throttles the addresses that offer too
// many wrong ones, and sends bullpen's own to the APIs it calls.
package httpauth

import (
	"net/http"
	"strings"
)

// Bearer returns the token of an Authorization header using the Bearer
// scheme, whose name is case-insensitive (RFC 9110, 11.1).
func Bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// BearerTransport sends token as a bearer token on every request over next.
func BearerTransport(token string, next http.RoundTripper) http.RoundTripper {
	return &bearerTransport{token: token, next: next}
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (t *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(req)
}
