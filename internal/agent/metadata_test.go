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

// The identity document reaches hello byte for byte as EC2 served it: its
// signature is over those bytes, and a document trimmed of its white space
// would fail the control plane's check. The other values lose theirs.
func TestTheIdentityDocumentIsSentAsServed(t *testing.T) {
	const doc = "{\n  \"instanceId\" : \"i-bp-1\",\n  \"region\" : \"us-east-1\"\n}\n"
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/latest/api/token":
			w.Write([]byte("session\n"))
		case "/latest/dynamic/instance-identity/document":
			if r.Header.Get("X-aws-ec2-metadata-token") != "session" {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			w.Write([]byte(doc))
		case "/latest/dynamic/instance-identity/signature":
			w.Write([]byte("c2lnbmVk\n"))
		}
	}))
	defer imds.Close()
	gotDoc, sig, err := IdentityFromIMDS(context.Background(), imds.Client(), imds.URL)
	if err != nil {
		t.Fatal(err)
	}
	if gotDoc != doc || sig != "c2lnbmVk" {
		t.Fatalf("document %q and signature %q, want %q and the signature without its line end", gotDoc, sig, doc)
	}
}
