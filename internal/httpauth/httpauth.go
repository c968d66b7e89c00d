// Package httpauth reads the credentials of bullpen's HTTP APIs.
package httpauth

import "strings"

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
