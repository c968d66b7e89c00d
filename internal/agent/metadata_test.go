package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A metadata service that refuses its session token (401) is trouble to
// retry, never the control plane refusing the agent's credentials: that
// ends the agent with status 3, which systemd does not restart.
func TestAMetadataRefusalIsNotARefusedCredential(t *testing.T) {
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.Write([]byte("session"))
			return
		}
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	}))
	defer imds.Close()
	_, err := imdsGet(context.Background(), imds.Client(), imds.URL, "meta-data/instance-id")
	if err == nil || errors.Is(err, ErrUnauthorized) || !transient(err) {
		t.Fatalf("error %v (unauthorized %t, transient %t), want a transient error", err, errors.Is(err, ErrUnauthorized), transient(err))
	}
}
