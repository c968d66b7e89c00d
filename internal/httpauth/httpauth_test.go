package httpauth

import (
	"net/http"
	"testing"
)

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

type recordingTransport struct{ got *http.Request }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = req
	return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: req}, nil
}

// The token goes on the request sent, not on the caller's, which may be
// sent again elsewhere.
func TestBearerTransport(t *testing.T) {
	next := &recordingTransport{}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/x", nil)
	resp, err := BearerTransport("tok", next).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := next.got.Header.Get("Authorization"); got != "Bearer tok" {
		t.Fatalf("sent Authorization %q", got)
	}
	if got := req.Header.Get("Authorization"); got != "" {
		t.Fatalf("the caller's request was changed: Authorization %q", got)
	}
}
