package httpauth

import "testing"

func TestBearer(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc": "abc", "BEARER  abc ": "abc",
		"Basic abc": "", "Bearer": "", "Bearer ": "", "": "", "abc": "",
	} {
		got, ok := Bearer(header)
		if got != want || ok != (want != "") {
			t.Errorf("Bearer(%q) = %q, %v", header, got, ok)
		}
	}
}
