package webhook

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/bullpen-ci/bullpen/internal/testfixtures"
)

func TestSignedPushIsHandedOver(t *testing.T) {
	var got []Push
	r := newRigWith(t, Options{OnPush: func(p Push) { got = append(got, p) }})
	body := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"acme/.github-private","default_branch":"main"},"commits":[]}`)
	if rec := r.post(headers(EventPush, "d-1", testfixtures.GoSign(testSecret, body)), bytes.NewReader(body)); rec.Code != http.StatusAccepted {
		t.Fatalf("push: %d %s", rec.Code, rec.Body)
	}
	if len(got) != 1 || got[0] != (Push{Repo: "acme/.github-private", Ref: "refs/heads/main", DefaultBranch: "main"}) {
		t.Fatalf("pushes %+v", got)
	}
	if rec := r.post(headers(EventPush, "d-2", testfixtures.GoSign("another secret", body)), bytes.NewReader(body)); rec.Code != http.StatusUnauthorized || len(got) != 1 {
		t.Fatalf("unsigned push: %d, %d pushes", rec.Code, len(got))
	}
	bad := []byte(`{"ref":"refs/heads/main"}`)
	if rec := r.post(headers(EventPush, "d-3", testfixtures.GoSign(testSecret, bad)), bytes.NewReader(bad)); rec.Code != http.StatusBadRequest || len(got) != 1 {
		t.Fatalf("push without a repository: %d, %d pushes", rec.Code, len(got))
	}
	if n := len(r.queue.sent("inbox")); n != 0 {
		t.Fatalf("a push reached the inbox (%d messages)", n)
	}
}

func TestPushWithoutAListenerIsIgnored(t *testing.T) {
	r := newRig(t)
	body := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"acme/app"}}`)
	if rec := r.post(headers(EventPush, "d-1", testfixtures.GoSign(testSecret, body)), bytes.NewReader(body)); rec.Code != http.StatusAccepted {
		t.Fatalf("push: %d %s", rec.Code, rec.Body)
	}
}
